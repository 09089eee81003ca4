"""Checks of the flags a launch passes to SGLang: extra_args rules, then SGLang's own parser."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from contract.params.launch import exiting_flag_problem, extra_arg_paths, path_problem
from drafting import sglang_facts as rules
from drafting.findings import Finding, error, info, warning
from drafting.serving.launch.sglang_parser import canonical_flags, parse_with_sglang

# argparse's own actions that print and exit; SGLang's parser may add others (any action that exits is also
# caught when the rendered args are parsed: ParseOutcome.exit_status).
_EXITING_ACTIONS: tuple[type[argparse.Action], ...] = (argparse._HelpAction, argparse._VersionAction)


def check_extra_args(args: Sequence[str], parser: argparse.ArgumentParser | None) -> list[Finding]:
    """Flags that are foreign, ignored, forbidden or already rendered by eyas; file values that are unsafe."""
    findings: list[Finding] = []
    for flag in _flags_in(args):
        finding = _check_flag(flag, parser)
        if finding is not None:
            findings.append(finding)
    for flag, value in extra_arg_paths(list(args)):
        problem = path_problem(value)
        if problem is not None:
            fix = "give an absolute path under the host's allowed roots"
            findings.append(error("PATH_FLAG_INVALID", f"{flag} {value!r}: {problem}", fix))
    return findings


def check_with_sglang_parser(
    server_args: Sequence[str], parser: argparse.ArgumentParser | None
) -> list[Finding]:
    """Run the rendered server args through SGLang's own parser (unknown flags exit 2 in `sglang serve`)."""
    if parser is None:
        return [
            info(
                "SGLANG_PARSER_UNAVAILABLE",
                "SGLang's parser was not used (sglang not importable here, or skipped): flags were "
                "checked against eyas's own lists only",
                "render on a host with sglang installed for a full check",
            )
        ]
    outcome = parse_with_sglang(parser, server_args)
    findings = [_unknown_flag(flag) for flag in outcome.unknown if flag not in rules.FOREIGN_FLAGS]
    if outcome.exit_status is not None:
        message = (
            f"SGLang's parser exits (status {outcome.exit_status}) on these args instead of serving: the "
            "launch would end without a server"
        )
        findings.append(error("FLAG_EXITS_WITHOUT_SERVING", message, "remove the flag that prints and exits"))
    if outcome.error is not None:
        findings.append(
            error("SGLANG_PARSE_ERROR", f"SGLang's parser: {outcome.error}", "fix the flag it names")
        )
    return findings


def _flags_in(args: Sequence[str]) -> list[str]:
    return [arg.partition("=")[0] for arg in args if arg.startswith("-") and not _is_number(arg)]


def _is_number(arg: str) -> bool:
    return arg.lstrip("-").replace(".", "", 1).isdigit()


def _check_flag(flag: str, parser: argparse.ArgumentParser | None) -> Finding | None:
    spellings = canonical_flags(parser, flag) or (flag,)
    exiting = _exiting_flag(flag, spellings, parser)
    if exiting is not None:
        return exiting
    for spelling in spellings:
        if spelling in rules.FORBIDDEN_FLAGS:
            return error("FORBIDDEN_FLAG", f"{flag}: {rules.FORBIDDEN_FLAGS[spelling]}", "remove it")
    if flag in rules.FOREIGN_FLAGS:
        return error(
            "UNKNOWN_FLAG", f"{flag} is not an SGLang flag (argparse exits 2)", rules.FOREIGN_FLAGS[flag]
        )
    owner = _owning_field(flag, spellings, parser)
    if owner is not None:
        message = f"{flag} is rendered by eyas from the spec; setting it again in extra_args is refused"
        return error("FLAG_OWNED_BY_EYAS", message, f"set the `{owner}` field instead")
    for spelling in spellings:
        if spelling in rules.IGNORED_FLAGS:
            return warning(
                "IGNORED_FLAG", f"{flag}: {rules.IGNORED_FLAGS[spelling]}", "remove it; it has no effect"
            )
    return None


def _exiting_flag(
    flag: str, spellings: Sequence[str], parser: argparse.ArgumentParser | None
) -> Finding | None:
    """-h/--help/--version (or an abbreviation), or any flag SGLang's parser maps to a help/version action."""
    problem = next((p for s in (flag, *spellings) if (p := exiting_flag_problem(s)) is not None), None)
    if problem is None and parser is not None and spellings:
        action = parser._option_string_actions.get(spellings[0])  # argparse has no public map
        if isinstance(action, _EXITING_ACTIONS):
            problem = f"{flag} is an argparse {type(action).__name__} in SGLang's parser: it prints and exits"
    if problem is None:
        return None
    return error("FLAG_EXITS_WITHOUT_SERVING", problem, "remove it from extra_args")


def _owning_field(flag: str, spellings: Sequence[str], parser: argparse.ArgumentParser | None) -> str | None:
    for spelling in spellings:
        if spelling in rules.OWNED_FLAGS:
            return rules.OWNED_FLAGS[spelling]
    if parser is None:
        # Without SGLang's parser an abbreviation cannot be resolved: refuse any prefix of an owned flag.
        for owned, owner in rules.OWNED_FLAGS.items():
            if owned.startswith(flag) and len(flag) > 2:
                return owner
    return None


def _unknown_flag(flag: str) -> Finding:
    return error(
        "UNKNOWN_FLAG",
        f"{flag} is not a flag of the installed SGLang: `sglang serve` would exit 2 before loading anything",
        "check the spelling against `python -m sglang.launch_server --help`",
    )
