"""ExecuTorch's runtime verifies a bundled program (`.bpte`): the oracle of the bundle interop tests.

Loads the bundle with the pybindings' `_load_bundled_program_from_buffer` and runs
`BundledModule.verify_result_with_bundled_expected_output` on every case, with the tolerances
per method (the build's, from `verify.json`). Imported only when called; `executorch` is the
interop extra.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from etbuild.devtools.bundle_format import read_bundle
from etbuild.devtools.bundle_verify import EXECUTORCH_DEFAULT, Tolerance
from etbuild.verify.oracle_samples import needs_quantized_kernels


def verify_in_executorch(
    bpte: Path, tolerances: Mapping[str, Tolerance] | None = None
) -> list[tuple[str, int, str]]:
    """(method, case, "" or ExecuTorch's error) for every case of the bundle, in order."""
    from executorch.extension.pybindings import _C

    data = bpte.read_bytes()  # the bundled module reads these bytes: keep them alive
    bundle = read_bundle(data, str(bpte))
    if needs_quantized_kernels(bytes(bundle.program)):
        import executorch.kernels.quantized  # noqa: F401  (registers quantized_decomposed's kernels)
    module = _C._load_bundled_program_from_buffer(data)
    results = []
    for suite in bundle.method_test_suites:
        tol = (tolerances or {}).get(suite.method_name, EXECUTORCH_DEFAULT)
        for i in range(len(suite.test_cases)):
            try:
                module.verify_result_with_bundled_expected_output(suite.method_name, i, tol.rtol, tol.atol)
                results.append((suite.method_name, i, ""))
            except RuntimeError as exc:
                results.append((suite.method_name, i, str(exc)))
    return results
