"""Compare two OpenAI endpoints request by request (`shakedown parity`)."""

from .cases import DEFAULT_CASES, Case, CaseError, load_cases, parse_cases
from .client import Endpoint, FetchError, Response, parse_endpoint
from .normalize import normalized_lines
from .runner import Outcome, ParityReport, add_parity_subcommand, run_parity, served_model

__all__ = [
    "DEFAULT_CASES",
    "Case",
    "CaseError",
    "Endpoint",
    "FetchError",
    "Outcome",
    "ParityReport",
    "Response",
    "add_parity_subcommand",
    "load_cases",
    "normalized_lines",
    "parse_cases",
    "parse_endpoint",
    "run_parity",
    "served_model",
]
