"""The editor's forms (``relay.control.dashboard.edit_forms``): a posted form becomes exactly the body
the control API would receive, every kind's spec accepts what a filled form sends, secrets are never
shown back nor echoed, and a JSON area that is not JSON is refused naming the field."""

from __future__ import annotations

import pytest

from relay.control.dashboard.edit_forms import FORMS, TITLES, body_of, echoed, shown
from relay.control.kinds import BY_PLURAL
from relay.errors import InvalidRequest


def test_every_catalog_kind_has_a_form_whose_fields_its_spec_knows() -> None:
    assert set(FORMS) == set(BY_PLURAL) == set(TITLES)
    for plural, fields in FORMS.items():
        known = set(BY_PLURAL[plural].spec.model_fields)
        assert {f.name for f in fields} <= known, plural


def test_a_policy_form_becomes_the_api_body() -> None:
    posted = {
        "csrf": "x",
        "name": " p1 ",
        "models": "*, openai/*\ngpt@h",
        "host_keys": "",
        "key_selection": "round_robin",
        "rate_limit": '{"rules": [{"meter": "requests", "limit": 5}]}',
        "fallbacks": "",
        "batch": "",
        "cache": "",
        "enabled": "on",
    }
    body = body_of("policies", posted)
    assert body == {
        "name": "p1",
        "models": ["*", "openai/*", "gpt@h"],
        "host_keys": [],
        "key_selection": "round_robin",
        "rate_limit": {"rules": [{"meter": "requests", "limit": 5}]},
        "fallbacks": {},
        "batch": {},
        "cache": None,
        "guardrails": [],  # the form shows the current list, so an untouched edit keeps it
        "payload_logging": False,  # an unticked checkbox is not posted: false
        "enabled": True,
    }
    BY_PLURAL["policies"].spec.model_validate(body)  # what the API accepts


def test_a_guardrail_form_sends_one_matcher_and_nulls_the_others() -> None:
    posted = {"name": "no-keys", "stage": "output", "action": "redact", "regex": '["sk-[a-z]+"]', "pii": ""}
    body = body_of("guardrails", posted)
    assert body == {
        "name": "no-keys",
        "stage": "output",
        "action": "redact",
        "regex": ["sk-[a-z]+"],
        "pii": None,  # switching a guardrail from pii to regex clears the pii list
        "webhook": None,
        "message": "",
    }
    BY_PLURAL["guardrails"].spec.model_validate(body)  # what the API accepts
    shown_again = shown("guardrails", body)
    assert shown_again["regex"] == '[\n  "sk-[a-z]+"\n]' and shown_again["pii"] == ""


def test_blank_secrets_are_left_out_so_an_edit_keeps_them() -> None:
    body = body_of(
        "host-keys", {"name": "k", "host": "h", "value": "", "value_from_env": "", "enabled": "on"}
    )
    assert "value" not in body and "value_from_env" not in body
    assert body_of("host-keys", {"name": "k", "host": "h", "value": " s3cret "})["value"] == " s3cret "
    assert "events" not in body_of("webhooks", {"name": "w", "url": "https://x"})  # the API's default


def test_a_json_area_that_is_not_json_names_the_field() -> None:
    with pytest.raises(InvalidRequest) as caught:
        body_of("bindings", {"name": "b", "pricing": "{input: 1}"})
    assert caught.value.message.startswith("pricing: not valid JSON")
    assert caught.value.status == 400


def test_secrets_are_never_shown_nor_echoed() -> None:
    current = {"name": "u", "email": "a@b", "password": "hunter22", "enabled": True, "memberships": []}
    values = shown("users", current)
    assert values["password"] == "" and values["enabled"] == "on" and values["memberships"] == ""
    assert echoed("users", {"csrf": "t", "name": "u", "password": "hunter22"}) == {
        "name": "u",
        "password": "",
    }
    policy = shown("policies", {"name": "p", "models": ["*"], "fallbacks": {"a": ["b"]}, "enabled": False})
    assert policy["models"] == "*" and '"a"' in policy["fallbacks"] and policy["enabled"] == ""


def test_a_rendered_object_shown_in_its_form_posts_back_as_a_valid_body() -> None:
    """What the API renders (references with their ``_id`` beside them) is shown as a body would be
    written, so saving an edit form unchanged is accepted."""
    rendered = {
        "id": "usr_1",
        "name": "u",
        "email": "a@b.example",
        "enabled": True,
        "token_version": 3,
        "memberships": [{"project": "p", "project_id": "prj_1", "policy": None, "policy_id": None}],
    }
    values = shown("users", rendered)
    assert "_id" not in values["memberships"]
    body = body_of("users", values)
    assert body["memberships"] == [{"project": "p", "policy": None}]
    BY_PLURAL["users"].spec.model_validate(body)
