"""Failures grouped by §10.4 cause (relay.domain.failures), without a database."""

from relay.domain.failures import cause_of, group_failures


def test_each_prefix_is_its_own_cause() -> None:
    cases = {
        "upstream returned 503": "upstream returned 503",
        'all keys of host "h1" failed: 3 attempts': 'all keys of host "h1" failed',
        'no healthy keys for host "h1"': 'no healthy keys for host "h1"',
        "routing: unknown model 'x'": "routing",
        "cross-shape dispatch: item shape anthropic, binding adapter openai": "cross-shape dispatch",
        "rate limit exceeded: rpm": "rate limit exceeded",
        "budget exceeded: daily": "budget exceeded",
        "credential no longer valid: api key revoked": "credential no longer valid",
        'policy unavailable: policy "p" was deleted': "policy unavailable",
        "timeout: item ran longer than 300 s": "timeout",
        "load input: the request file is missing": "load input",
        "worker lost: replica r1 stopped": "worker lost",
        "something new": "other",
    }
    for error, cause in cases.items():
        assert cause_of(error) == cause, error


def test_groups_sum_counts_keep_examples_and_sort_by_count() -> None:
    groups = group_failures(
        [
            ("routing: unknown model 'a'", 1),
            ("upstream returned 400", 5),
            ("routing: unknown model 'b'", 2),
            ("routing: unknown model 'c'", 1),
            ("routing: unknown model 'd'", 1),
        ]
    )
    assert [(g["cause"], g["count"]) for g in groups] == [("routing", 5), ("upstream returned 400", 5)]
    routing = groups[0]
    assert len(routing["examples"]) == 3 and routing["examples"][0] == "routing: unknown model 'b'"
    assert group_failures([]) == []
