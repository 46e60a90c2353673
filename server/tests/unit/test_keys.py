"""API key tokens, hashing and principals."""

from __future__ import annotations

import pytest

from orbit_server.errors import Forbidden
from orbit_server.governance.keys import (
    Principal,
    Role,
    generate_key,
    parse_roles,
    parse_token,
    secret_matches,
)
from orbit_server.scope import Scope


def test_generated_keys_parse_back_and_verify() -> None:
    new = generate_key()
    parsed = parse_token(new.token)
    assert parsed is not None and parsed[0] == new.id
    assert secret_matches(parsed[1], new.secret_hash)
    assert not secret_matches(parsed[1] + "x", new.secret_hash)
    assert new.secret_hash != parsed[1] and len(new.secret_hash) == 64


def test_keys_are_unique() -> None:
    assert len({generate_key().token for _ in range(200)}) == 200


@pytest.mark.parametrize(
    "token", ["", "ok_", "ok_abc", "ok__secretsecretsecretsecret", "xx_a_" + "s" * 40]
)
def test_malformed_tokens_are_rejected(token: str) -> None:
    assert parse_token(token) is None


def test_roles_parse_in_a_stable_order() -> None:
    assert parse_roles(["admin", "Worker", "worker"]) == (Role.WORKER, Role.ADMIN)
    with pytest.raises(ValueError, match="unknown role"):
        parse_roles(["root"])
    with pytest.raises(ValueError, match="at least one"):
        parse_roles([])


def test_principal_role_and_queue_checks() -> None:
    worker = Principal("k", Scope("a", "b"), frozenset({Role.WORKER}), frozenset({"emails"}))
    worker.require(Role.WORKER, Role.ADMIN)
    with pytest.raises(Forbidden, match="operator"):
        worker.require(Role.OPERATOR)
    assert worker.may_use_queue("emails") and not worker.may_use_queue("reports")
    anywhere = Principal("k", Scope("a", "b"), frozenset({Role.WORKER}), None)
    assert anywhere.may_use_queue("anything")


@pytest.mark.parametrize("name", ["", "Acme", "a" * 65, "-x", "a b", "x/y"])
def test_invalid_scope_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="invalid"):
        Scope(name, "prod")
