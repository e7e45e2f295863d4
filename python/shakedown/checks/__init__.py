"""The reference check runner: checks any OpenAI-compatible endpoint; the default gate."""

from .cli import add_check_subcommand, main
from .runner import CHECKS, CheckResult, Settings, run_checks

__all__ = ["CHECKS", "CheckResult", "Settings", "add_check_subcommand", "main", "run_checks"]
