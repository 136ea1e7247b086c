"""Helpers for testing Tessera and backends built on it (ONNX conformance runner)."""
