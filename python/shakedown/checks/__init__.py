"""The reference check runner: checks any OpenAI-compatible endpoint; the default gate.

``run_checks`` runs the default suite (nine checks); ``run_suite`` runs any suite, loaded with
``load_suite`` from a TOML or JSON file.
"""

from .cli import add_check_subcommand, main
from .context import Settings
from .options import SuiteError
from .results import CaseResult, CheckResult
from .runner import Progress, run_checks, run_suite
from .suite import Suite, default_suite, load_suite

__all__ = [
    "CaseResult",
    "CheckResult",
    "Progress",
    "Settings",
    "Suite",
    "SuiteError",
    "add_check_subcommand",
    "default_suite",
    "load_suite",
    "main",
    "run_checks",
    "run_suite",
]
