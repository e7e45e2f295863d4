"""Validation reports: JSON for people and tools, JUnit XML for CI systems, and log lines."""

from __future__ import annotations

import logging
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from .files import write_private_file

logger = logging.getLogger("shakedown.validation")

Outcome = Literal["passed", "failed", "skipped"]


@dataclass(frozen=True)
class GateResult:
    name: str
    kind: Literal["exec", "url"]
    outcome: Outcome
    duration_s: float
    reason: str
    exit_code: int | None = None
    http_status: int | None = None
    log_tail: str = ""
    log_path: str | None = None

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"


@dataclass
class ValidationReport:
    """What happened to one worker's validation: ``released`` or ``held``, and why; after
    release, ``unreleased`` when rechecks took it out of service (``recheck`` says how)."""

    status: Literal["released", "held", "unreleased"]
    reason: str
    model: str | None
    base_url: str | None
    parallel: bool
    started_at: float
    duration_s: float
    gates: list[GateResult] = field(default_factory=list)
    # The 0600 file holding the held endpoint's bearer token (the token is never reported).
    token_file: str | None = None
    # With rechecks on: their counts and the last one's verdict.
    recheck: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["started_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started_at))
        data["duration_s"] = round(self.duration_s, 3)
        for gate in data["gates"]:
            gate["duration_s"] = round(gate["duration_s"], 3)
        return data

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2)

    def to_junit(self) -> bytes:
        return junit_xml(
            "shakedown.validation",
            [
                JUnitCase(
                    name=gate.name,
                    outcome=gate.outcome,
                    duration_s=gate.duration_s,
                    message=gate.reason,
                    output=gate.log_tail,
                )
                for gate in self.gates
            ],
        )

    def write(self, path: Path) -> tuple[Path, Path]:
        """Write JSON at ``path`` and JUnit XML beside it (same name, ``.xml``), each 0600 and
        each replacing whatever was there (a symlink is replaced, not followed)."""
        json_path = path.with_suffix(".json") if path.suffix == ".xml" else path
        xml_path = path.with_suffix(".xml")
        write_private_file(json_path, self.to_json())
        write_private_file(xml_path, self.to_junit())
        return json_path, xml_path

    def log(self) -> None:
        level = logging.INFO if self.status == "released" else logging.ERROR
        logger.log(level, "worker validation %s: %s", self.status, self.reason)
        for gate in self.gates:
            detail = _status_detail(gate)
            logger.log(
                logging.INFO if gate.outcome != "failed" else logging.ERROR,
                "  gate %r %s in %.2fs%s: %s",
                gate.name,
                gate.outcome,
                gate.duration_s,
                detail,
                gate.reason,
            )
            if gate.outcome == "failed" and gate.log_tail:
                logger.error("  gate %r log tail:\n%s", gate.name, gate.log_tail)


def _status_detail(gate: GateResult) -> str:
    if gate.exit_code is not None:
        return f" (exit {gate.exit_code})"
    if gate.http_status is not None:
        return f" (HTTP {gate.http_status})"
    return ""


@dataclass(frozen=True)
class JUnitCase:
    name: str
    outcome: Outcome
    duration_s: float
    message: str
    output: str = ""


def junit_xml(suite: str, cases: Sequence[JUnitCase]) -> bytes:
    """One ``<testsuite>`` in a ``<testsuites>`` root, the shape CI systems read."""
    failures = sum(case.outcome == "failed" for case in cases)
    skipped = sum(case.outcome == "skipped" for case in cases)
    total_s = sum(case.duration_s for case in cases)
    root = ET.Element("testsuites", _attrs(suite, cases, failures, skipped, total_s))
    suite_el = ET.SubElement(root, "testsuite", _attrs(suite, cases, failures, skipped, total_s))
    for case in cases:
        case_el = ET.SubElement(
            suite_el,
            "testcase",
            {"classname": suite, "name": case.name, "time": f"{case.duration_s:.3f}"},
        )
        if case.outcome == "failed":
            failure = ET.SubElement(case_el, "failure", {"message": _xml_safe(case.message)})
            failure.text = _xml_safe(case.message)
        elif case.outcome == "skipped":
            ET.SubElement(case_el, "skipped", {"message": _xml_safe(case.message)})
        if case.output:
            ET.SubElement(case_el, "system-out").text = _xml_safe(case.output)
    return bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True))


def _attrs(
    suite: str, cases: Iterable[JUnitCase], failures: int, skipped: int, total_s: float
) -> dict[str, str]:
    return {
        "name": suite,
        "tests": str(sum(1 for _ in cases)),
        "failures": str(failures),
        "errors": "0",
        "skipped": str(skipped),
        "time": f"{total_s:.3f}",
    }


def _xml_safe(text: str) -> str:
    # XML 1.0 forbids most control characters; gate logs (ANSI colours, NULs) often carry them.
    return "".join(
        ch
        if ch in "\t\n\r"
        or (" " <= ch <= "\ud7ff")
        or ("\ue000" <= ch <= "\ufffd")
        or ch > "\uffff"
        else "\ufffd"
        for ch in text
    )
