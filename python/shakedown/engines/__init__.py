"""Engines shipped with shakedown (the scripted mocker)."""

from .mocker import Mocker, MockerError, MockerRequestError, load_replay_trace, script_table

__all__ = [
    "Mocker",
    "MockerError",
    "MockerRequestError",
    "load_replay_trace",
    "script_table",
]
