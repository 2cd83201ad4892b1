"""The `.bpte` container: our writer and reader, both ways with ExecuTorch's serializer, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from etbuild.devtools import bundle_format as bf
from etbuild.errors import InvalidBundle
from tests.conftest import requires_executorch


def _bundle(pte: bytes) -> bytes:
    rng = np.random.default_rng(0)
    cases = [([rng.standard_normal((2, 16)).astype(np.float32), 3, True, 0.5],
              [rng.integers(0, 9, (4,)).astype(np.int64)]) for _ in range(2)]
    return bf.write_bundle(pte, {"forward": cases, "a_method": cases[:1]})


def test_types_are_the_schemas_tables() -> None:
    from etbuild.devtools.schemas import devtools_schema

    schema = devtools_schema(bf.SCHEMA_FILE)
    assert schema.file_identifier == "BP08" and schema.root_type == "BundledProgram"
    for name, fields in schema.tables.items():
        assert [f.name for f in fields] == list(bf.TYPES[name].__dataclass_fields__), name
    assert bf.Tensor().data == b"" and bf.Tensor().sizes == [] and bf.Value().val is None


def test_round_trip(small_mlp_pte) -> None:
    pte = small_mlp_pte.read_bytes()
    data = _bundle(pte)
    assert data[4:8] == b"BP08"
    bundle = bf.read_bundle(data)
    assert bundle.version == bf.VERSION and bytes(bundle.program) == pte
    assert [s.method_name for s in bundle.method_test_suites] == ["a_method", "forward"]  # sorted, as ExecuTorch's
    case = bundle.method_test_suites[1].test_cases[1]
    values = [bf.value_object(v, "x") for v in case.inputs]
    rng = np.random.default_rng(0)
    rng.standard_normal((2, 16)), rng.integers(0, 9, (4,))
    np.testing.assert_array_equal(values[0], rng.standard_normal((2, 16)).astype(np.float32))
    assert values[1:] == [3, True, 0.5] and type(values[1]) is int and type(values[2]) is bool
    assert bf.value_object(case.expected_outputs[0], "x").dtype == np.int64


def test_program_is_32_byte_aligned(small_mlp_pte) -> None:
    data = _bundle(small_mlp_pte.read_bytes())
    pte = small_mlp_pte.read_bytes()
    assert data.index(pte) % 32 == 0


def test_channels_last_tensor_reads_in_logical_order() -> None:
    logical = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    stored = np.ascontiguousarray(logical.transpose(0, 2, 3, 1))
    t = bf.Tensor(6, [1, 2, 3, 4], stored.tobytes(), bytes([0, 2, 3, 1]))
    np.testing.assert_array_equal(bf.tensor_array(t, "x"), logical)


@pytest.mark.parametrize("cut", [0, 7, 8, 40, 200, -1])
def test_truncated_bundle_is_a_typed_error(small_mlp_pte, cut: int) -> None:
    data = _bundle(small_mlp_pte.read_bytes())
    with pytest.raises(InvalidBundle, match=r"^x\.bpte: "):
        bf.read_bundle(data[:cut] if cut >= 0 else data[: len(data) // 2], "x.bpte")


def test_foreign_file_names_what_it_expected(small_mlp_pte) -> None:
    with pytest.raises(InvalidBundle, match=r"x\.bpte: identifier is b'ET12', expected b'BP08'"):
        bf.read_bundle(small_mlp_pte.read_bytes(), "x.bpte")


def test_tensor_bytes_must_fit_sizes(small_mlp_pte) -> None:
    bad = bf.BundledProgram(2, [bf.BundledMethodTestSuite("forward", [bf.BundledMethodTestCase(
        [bf.Value(bf.Tensor(6, [2, 16], b"\0" * 12, bytes([0, 1])))], [])])], small_mlp_pte.read_bytes())
    data = bf.encode(bad, bf.bundle_schema())
    with pytest.raises(InvalidBundle, match=r"method 'forward' case 0 input 0: 12 data bytes for float32\[2, 16\]"):
        bf.read_bundle(data, "x.bpte")


@requires_executorch
def test_executorch_reads_ours_and_we_read_theirs(small_mlp, small_mlp_pte, tmp_path) -> None:
    import torch
    from executorch.devtools import BundledProgram
    from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
    from executorch.devtools.bundled_program.serialize import (
        deserialize_from_flatbuffer_to_bundled_program,
        serialize_from_bundled_program_to_flatbuffer,
    )

    model, (x,) = small_mlp
    ours = bf.write_bundle(small_mlp_pte.read_bytes(), {"forward": [([x.numpy()], [model(x).detach().numpy()])]})
    read = deserialize_from_flatbuffer_to_bundled_program(ours)
    tensor = read.method_test_suites[0].test_cases[0].inputs[0].val
    assert (read.version, tensor.sizes, bytes(tensor.data)) == (2, [2, 16], x.numpy().tobytes())

    suite = MethodTestSuite("forward", [MethodTestCase([x], [model(x)])])
    theirs = serialize_from_bundled_program_to_flatbuffer(
        BundledProgram(None, [suite], pte_file_path=str(small_mlp_pte)))
    bundle = bf.read_bundle(theirs, "theirs.bpte")
    case = bundle.method_test_suites[0].test_cases[0]
    np.testing.assert_array_equal(bf.value_object(case.inputs[0], "x"), x.numpy())
    with torch.no_grad():
        np.testing.assert_array_equal(bf.value_object(case.expected_outputs[0], "x"), model(x).numpy())
