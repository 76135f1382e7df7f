"""Expected values of tests/ops/test_rnn.cpp: one-node ONNX LSTM / GRU / RNN models run by ONNX
Runtime (an independent implementation), written as tests/ops/rnn_ort_expected.h.

Inputs are pattern(shape, phase, scale): element i = sin(0.37 i + phase) * scale, float32, as the
C++ test builds them. Run with the torch venv (it has onnxruntime):
    /work/main/.venvs/torch/bin/python tests/scripts/rnn_ort_reference.py
"""
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

OUT = os.path.join(os.path.dirname(__file__), "..", "ops", "rnn_ort_expected.h")


def pattern(shape, phase, scale=1.0):
    n = int(np.prod(shape))
    return (np.sin(0.37 * np.arange(n) + phase) * scale).astype(np.float32).reshape(shape)


def run(op, inputs, attrs, n_out):
    """inputs: list of (name, array or None); returns the n_out outputs. ONNX Runtime refuses
    layout 1, which ONNX defines as layout 0 with X / states / outputs transposed: such a case runs
    as layout 0 on transposed inputs, its outputs transposed back."""
    if attrs.get("layout", 0) == 1:
        attrs = {k: v for k, v in attrs.items() if k != "layout"}
        inputs = [(n, None if a is None else a.transpose(1, 0, 2) if n in ("x0", "x5", "x6") else a)
                  for n, a in inputs]
        outs = run(op, inputs, attrs, n_out)
        return [outs[0].transpose(2, 0, 1, 3)] + [o.transpose(1, 0, 2) for o in outs[1:]]
    names = [n if a is not None else "" for n, a in inputs]
    while names and names[-1] == "":
        names.pop()
    outs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    g_in = []
    feed = {}
    for n, a in inputs:
        if a is None:
            continue
        et = TensorProto.INT32 if a.dtype == np.int32 else TensorProto.FLOAT
        g_in.append(helper.make_tensor_value_info(n, et, a.shape))
        feed[n] = a
    g_out = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs]
    m = helper.make_model(helper.make_graph([node], "g", g_in, g_out), opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(outs, feed)


def cxx(name, a):
    vals = ", ".join(f"{v:.9g}" for v in a.astype(np.float64).ravel())
    return f"const std::vector<double> {name} = {{{vals}}};  // shape {list(a.shape)}\n"


def main():
    text = ["// Made by tests/scripts/rnn_ort_reference.py with ONNX Runtime " + ort.__version__ +
            ": do not edit.\n#pragma once\n#include <vector>\n\nnamespace rnn_expected {\n"]

    # A: LSTM bidirectional, layout 1 (batch first), B, sequence_lens, initial_h / initial_c, peepholes.
    T, B, I, H, D = 4, 3, 2, 3, 2
    a = run("LSTM", [("x0", pattern([B, T, I], 0.1)), ("x1", pattern([D, 4 * H, I], 0.2, 0.5)),
                     ("x2", pattern([D, 4 * H, H], 0.3, 0.5)), ("x3", pattern([D, 8 * H], 0.4, 0.3)),
                     ("x4", np.array([4, 2, 3], np.int32)), ("x5", pattern([B, D, H], 0.5, 0.4)),
                     ("x6", pattern([B, D, H], 0.6, 0.4)), ("x7", pattern([D, 3 * H], 0.7, 0.3))],
            dict(hidden_size=H, direction="bidirectional", layout=1), 3)
    text += [cxx("kLstmA_Y", a[0]), cxx("kLstmA_Yh", a[1]), cxx("kLstmA_Yc", a[2])]

    # B: GRU reverse, layout 0, linear_before_reset 0, B, sequence_lens, initial_h.
    T, B, I, H, D = 3, 2, 3, 2, 1
    b = run("GRU", [("x0", pattern([T, B, I], 0.1)), ("x1", pattern([D, 3 * H, I], 0.2, 0.5)),
                    ("x2", pattern([D, 3 * H, H], 0.3, 0.5)), ("x3", pattern([D, 6 * H], 0.4, 0.3)),
                    ("x4", np.array([3, 1], np.int32)), ("x5", pattern([D, B, H], 0.5, 0.4))],
            dict(hidden_size=H, direction="reverse"), 2)
    text += [cxx("kGruB_Y", b[0]), cxx("kGruB_Yh", b[1])]

    # C: GRU bidirectional, layout 1, linear_before_reset 1 (PyTorch's), B, no initial_h.
    T, B, I, H, D = 3, 2, 3, 2, 2
    c = run("GRU", [("x0", pattern([B, T, I], 0.1)), ("x1", pattern([D, 3 * H, I], 0.2, 0.5)),
                    ("x2", pattern([D, 3 * H, H], 0.3, 0.5)), ("x3", pattern([D, 6 * H], 0.4, 0.3))],
            dict(hidden_size=H, direction="bidirectional", layout=1, linear_before_reset=1), 2)
    text += [cxx("kGruC_Y", c[0]), cxx("kGruC_Yh", c[1])]

    # D: RNN bidirectional, layout 0, activations Relu / Tanh, clip, sequence_lens, initial_h, no B.
    T, B, I, H, D = 3, 2, 2, 3, 2
    d = run("RNN", [("x0", pattern([T, B, I], 0.1, 2.0)), ("x1", pattern([D, H, I], 0.2, 0.8)),
                    ("x2", pattern([D, H, H], 0.3, 0.5)), ("x3", None), ("x4", np.array([2, 3], np.int32)),
                    ("x5", pattern([D, B, H], 0.5, 0.4))],
            dict(hidden_size=H, direction="bidirectional", activations=["Relu", "Tanh"], clip=0.9), 2)
    text += [cxx("kRnnD_Y", d[0]), cxx("kRnnD_Yh", d[1])]

    # E: LSTM forward, layout 0, clip, activations HardSigmoid / Tanh / Softplus, no B, no states.
    T, B, I, H, D = 3, 2, 2, 2, 1
    e = run("LSTM", [("x0", pattern([T, B, I], 0.1, 2.0)), ("x1", pattern([D, 4 * H, I], 0.2, 0.8)),
                     ("x2", pattern([D, 4 * H, H], 0.3, 0.8))],
            dict(hidden_size=H, activations=["HardSigmoid", "Tanh", "Softplus"], clip=1.1), 3)
    text += [cxx("kLstmE_Y", e[0]), cxx("kLstmE_Yh", e[1]), cxx("kLstmE_Yc", e[2])]

    text.append("\n}  // namespace rnn_expected\n")
    with open(OUT, "w") as f:
        f.write("".join(text))
    print("wrote", os.path.normpath(OUT))


if __name__ == "__main__":
    main()
