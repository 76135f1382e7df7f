#!/usr/bin/env python3
"""Writes the bad-model corpus (and two small good models) that tests/importer/test_bad_models.cpp,
test_external_data.cpp and test_export.cpp load. Run once; the outputs are committed:

    python3 tests/bad_models/make_bad_models.py      # writes beside this script

Every bad model is a small valid model (y = x @ W + b) with one thing broken, so the error onnxdp
gives can only come from that one thing. Symlinks and hard links are not here: git keeps them
poorly, so the tests create them at run time (ext_link_template.onnx names the file "w.bin",
which the test makes a link).

Good models:
  good_inline.onnx          W, b inline; with good_inline_input_0.pb / good_inline_output_0.pb,
                            and x.npz (x for `onnxdp run`)
  good_external/model.onnx  W, b as external data in good_external/data/weights.bin (b at offset
                            64); with input_0.pb / output_0.pb
Expected outputs come from onnxruntime running the very file written here.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OPSET = 17

# The shared small model: x [2, 3] @ W [3, 2] + b [2] -> y [2, 2].
W = np.array([[0.5, -1.0], [2.0, 0.25], [-1.5, 3.0]], dtype=np.float32)
B = np.array([0.125, -0.75], dtype=np.float32)
X = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 4.0]], dtype=np.float32)


def make_model(initializers, nodes=None, inputs=None, opset=OPSET, domain_opsets=()):
    if nodes is None:
        nodes = [
            helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul"),
            helper.make_node("Add", ["xw", "b"], ["y"], name="add"),
        ]
    if inputs is None:
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    graph = helper.make_graph(nodes, "bad_model", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
                              initializer=initializers)
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in domain_opsets]
    m = helper.make_model(graph, opset_imports=opsets, producer_name="onnxdp-bad-models")
    m.ir_version = 8
    return m


def inline_inits():
    return [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "b")]


def external_tensor(name, dims, location, offset=None, length=None):
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", offset), ("length", length)):
        if v is not None:
            e = t.external_data.add()
            e.key, e.value = k, str(v)
    return t


def save(m, name):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(m.SerializeToString())


def save_pb(array, name, path):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


def run_ort(path, x):
    import onnxruntime as ort
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def main():
    # --- good models -------------------------------------------------------------------------
    good = make_model(inline_inits())
    onnx.checker.check_model(good)
    save(good, "good_inline.onnx")
    y = run_ort(os.path.join(HERE, "good_inline.onnx"), X)
    assert np.allclose(y, X @ W + B)
    save_pb(X, "x", os.path.join(HERE, "good_inline_input_0.pb"))
    save_pb(y, "y", os.path.join(HERE, "good_inline_output_0.pb"))
    # The same input for `onnxdp run MODEL --data x.npz` (the CLI test).
    np.savez(os.path.join(HERE, "x.npz"), x=X)

    ext_dir = os.path.join(HERE, "good_external")
    os.makedirs(os.path.join(ext_dir, "data"), exist_ok=True)
    blob = bytearray(64 + B.nbytes)
    blob[0:W.nbytes] = W.tobytes()
    blob[64:64 + B.nbytes] = B.tobytes()
    with open(os.path.join(ext_dir, "data", "weights.bin"), "wb") as f:
        f.write(bytes(blob))
    ext = make_model([external_tensor("W", [3, 2], "data/weights.bin", 0, W.nbytes),
                      external_tensor("b", [2], "data/weights.bin", 64, B.nbytes)])
    with open(os.path.join(ext_dir, "model.onnx"), "wb") as f:
        f.write(ext.SerializeToString())
    onnx.checker.check_model(os.path.join(ext_dir, "model.onnx"))
    y = run_ort(os.path.join(ext_dir, "model.onnx"), X)
    assert np.allclose(y, X @ W + B)
    save_pb(X, "x", os.path.join(ext_dir, "input_0.pb"))
    save_pb(y, "y", os.path.join(ext_dir, "output_0.pb"))

    # 24 bytes: exactly W's size, for the external-data cases below.
    with open(os.path.join(HERE, "ext_weights.bin"), "wb") as f:
        f.write(W.tobytes())

    # --- bad models --------------------------------------------------------------------------
    good_bytes = good.SerializeToString()
    # Cut inside the graph's initializer: a length-delimited field runs past the end.
    truncated = good_bytes[: len(good_bytes) * 2 // 3]
    try:
        onnx.ModelProto().ParseFromString(truncated)
        raise SystemExit("truncated model still parses: cut elsewhere")
    except Exception as e:  # google.protobuf.message.DecodeError
        if isinstance(e, SystemExit):
            raise
    with open(os.path.join(HERE, "truncated.onnx"), "wb") as f:
        f.write(truncated)
    with open(os.path.join(HERE, "empty.onnx"), "wb") as f:
        pass  # zero bytes parse as an empty ModelProto: no graph

    def ext_case(name, location, offset=0, length=W.nbytes, dims=(3, 2)):
        save(make_model([external_tensor("W", list(dims), location, offset, length),
                         numpy_helper.from_array(B, "b")]), name)

    ext_case("ext_parent_dir.onnx", "../bad_models/ext_weights.bin")
    ext_case("ext_absolute.onnx", "/etc/passwd")
    ext_case("ext_offset_past_end.onnx", "ext_weights.bin", offset=100)
    ext_case("ext_length_past_end.onnx", "ext_weights.bin", offset=8, length=24)
    ext_case("ext_size_mismatch.onnx", "ext_weights.bin", offset=0, length=16)
    ext_case("ext_missing_file.onnx", "no_such_weights.bin")
    ext_case("ext_bad_offset.onnx", "ext_weights.bin", offset="-8")
    ext_case("ext_link_template.onnx", "w.bin")

    # raw_data of 20 bytes for a float [3, 2] (needs 24).
    w_short = numpy_helper.from_array(W, "W")
    w_short.raw_data = w_short.raw_data[:20]
    save(make_model([w_short, numpy_helper.from_array(B, "b")]), "size_mismatch.onnx")

    # dims whose product is past 2^62 (2^40 * 2^40), with a few bytes of data.
    big = TensorProto()
    big.name, big.data_type = "W", TensorProto.FLOAT
    big.dims.extend([1 << 40, 1 << 40])
    big.raw_data = b"\0" * 8
    save(make_model([big, numpy_helper.from_array(B, "b")]), "dims_overflow.onnx")

    # Dims that claim gigabytes the file does not hold: onnxdp must compare the data with the claim
    # before it allocates the claim (test_bad_models.cpp runs these under a memory limit).
    claim = TensorProto()
    claim.name, claim.data_type = "W", TensorProto.FLOAT
    claim.dims.extend([1 << 32])  # 16 GiB of float32
    claim.raw_data = b"\0" * 8
    save(make_model([claim, numpy_helper.from_array(B, "b")]), "claims_16gib_raw_data.onnx")
    claim = TensorProto()
    claim.name, claim.data_type = "W", TensorProto.FLOAT
    claim.dims.extend([1 << 31])  # 8 GiB of float32 in float_data, which holds 2 values
    claim.float_data.extend([1.0, 2.0])
    save(make_model([claim, numpy_helper.from_array(B, "b")]), "claims_8gib_float_data.onnx")
    ext_case("ext_claims_16gib.onnx", "ext_weights.bin", length=None, dims=(1 << 32,))

    # A dynamo export whose dropped Conv bias onnxdp restores as zeros of the weight's output
    # channels: the weight's dims claim 2^30 of them, so the restored bias alone would be 4 GiB,
    # allocated before the weight's data (1536 bytes) was compared with its dims.
    vit = onnx.load(os.path.join(HERE, "..", "fixtures", "trainability", "dynamo_vit.onnx"))
    w = next(t for t in vit.graph.initializer if t.name == "patch.weight")
    w.dims[0] = 1 << 30
    save(vit, "restored_bias_claims_4gib.onnx")

    # An initializer with dims and a type but no data at all.
    empty = TensorProto()
    empty.name, empty.data_type = "W", TensorProto.FLOAT
    empty.dims.extend([3, 2])
    save(make_model([empty, numpy_helper.from_array(B, "b")]), "missing_initializer_data.onnx")

    save(make_model(inline_inits(), nodes=[
        helper.make_node("FancyMatMul", ["x", "W"], ["xw"], name="fancy"),
        helper.make_node("Add", ["xw", "b"], ["y"], name="add")]), "unknown_op.onnx")

    save(make_model(inline_inits(), nodes=[
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul", domain="com.example.custom"),
        helper.make_node("Add", ["xw", "b"], ["y"], name="add")],
        domain_opsets=[("com.example.custom", 1)]), "unknown_domain.onnx")

    save(make_model(inline_inits(), opset=99), "opset_too_new.onnx")
    save(make_model(inline_inits(), opset=6), "opset_too_old.onnx")

    # Node "add" reads "yy", which only the later node "relu" produces; "relu" reads "y": a cycle.
    save(make_model(inline_inits(), nodes=[
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul"),
        helper.make_node("Add", ["xw", "yy"], ["y"], name="add"),
        helper.make_node("Relu", ["y"], ["yy"], name="relu")]), "cyclic.onnx")

    save(make_model(inline_inits(), inputs=[
        helper.make_tensor_value_info("x", TensorProto.STRING, [2, 3])]), "input_string_type.onnx")
    seq = helper.make_value_info("x", helper.make_sequence_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, [2, 3])))
    save(make_model(inline_inits(), inputs=[seq]), "input_sequence_type.onnx")

    print("wrote", sorted(f for f in os.listdir(HERE) if not f.endswith(".py")))


if __name__ == "__main__":
    main()
