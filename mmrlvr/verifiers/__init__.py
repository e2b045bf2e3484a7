"""Verifiers: score a completion against a sample's reference. Never raise on model output."""

from mmrlvr.verifiers.base import VERIFIERS, Verdict, resolve_verifier, safe_verify  # noqa: F401
