"""The fault suite: three ``relay serve`` replicas on a private Postgres cluster and a private Redis."""
