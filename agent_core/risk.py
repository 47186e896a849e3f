"""Risk classes of tools and the policy that maps (scope, risk) to allow / ask / deny."""

from __future__ import annotations

from enum import StrEnum


class Risk(StrEnum):
    READ = "read"
    WRITE = "write"
    EXEC = "exec"


class Scope(StrEnum):
    MAIN = "main"
    SUB = "sub"


class Verdict(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


DEFAULT_POLICY: dict[Scope, dict[Risk, Verdict]] = {
    Scope.MAIN: {Risk.READ: Verdict.ALLOW, Risk.WRITE: Verdict.ALLOW, Risk.EXEC: Verdict.ASK},
    Scope.SUB: {Risk.READ: Verdict.ALLOW, Risk.WRITE: Verdict.DENY, Risk.EXEC: Verdict.DENY},
}
