#!/usr/bin/env python3
"""One ONNX Runtime Training run for bench/compare.py, in its own process (peak RSS read by the
parent with os.wait4). Runs with the python of the ORT virtualenv (bench/setup-peers), not the
one that runs compare.py: onnxruntime-training 1.19.2 needs onnx 1.16 and numpy < 2.

    .venvs/ort-training/bin/python bench/ort_worker.py --onnx MODEL.onnx --input x --data D.npz \
        --trainable T.json --batch B --steps N --threads T --lr 1e-3 --work DIR --out result.json

1. `onnxruntime.training.artifacts.generate_artifacts` on the same exported MODEL.onnx that onnxdp
   trains: requires_grad = the initializers named in T.json (the torch module's parameters, as
   compare.py found them in the file), every other initializer frozen; loss = mean cross entropy
   of the logits against the labels (the logits [..., C] flattened to [M, C] and the labels to [M],
   as onnxdp and F.cross_entropy take them); optimizer AdamW (betas 0.9 / 0.999, eps 1e-8,
   weight decay 0.01, torch's form: see _torch_adamw).
2. `onnxruntime.training.api` (CheckpointState, Module, Optimizer): N steps on D.npz in file order
   (wrapping around, like `onnxdp train --no-shuffle`), one intra-op thread pool of T threads.

Writes {"loop_s", "losses", "generate_s", ...} to --out; loop_s is the wall time of the N steps
alone (artifact generation and session creation excluded, as torch_worker.py excludes import and
set-up). A failure is written as {"error": ...} with the stage that failed (exit status 3), so that
the record says what ORT could not do.
"""
import argparse
import json
import os
import sys
import time
import traceback


def _flat_cross_entropy():
    """An onnxblock loss: Reshape(logits, [-1, C]) and Reshape(labels, [-1]), then the
    SoftmaxCrossEntropyLoss block (mean). ORT's own LossType.CrossEntropyLoss feeds the logits
    straight to SoftmaxCrossEntropyLoss, which takes the classes on axis 1: right for [N, C], wrong
    for a language model's [B, T, V]. The labels input gets the logits' shape without its last
    axis (batch dimension kept symbolic)."""
    import copy
    import numpy as np
    import onnx
    from onnxruntime.training import onnxblock

    class FlatCrossEntropy(onnxblock.Block):
        def __init__(self):
            super().__init__()
            self.ce = onnxblock.loss.CrossEntropyLoss(reduction="mean")

        def build(self, logits_name):
            g = self.base.graph
            out = next(o for o in g.output if o.name == logits_name)
            labels = copy.deepcopy(out)
            labels.name = "labels"
            labels.type.tensor_type.elem_type = onnx.TensorProto.INT64
            del labels.type.tensor_type.shape.dim[-1]
            g.input.append(labels)
            classes = out.type.tensor_type.shape.dim[-1].dim_value  # the logits' last axis, fixed
            if classes <= 0:
                raise RuntimeError(f"output {logits_name} has no fixed class axis (last dimension)")
            shapes = {"flat_ce.logits_shape": [-1, classes], "flat_ce.labels_shape": [-1]}
            for name, value in shapes.items():
                g.initializer.append(onnx.numpy_helper.from_array(np.array(value, np.int64), name))
            g.node.append(onnx.helper.make_node("Reshape", [logits_name, "flat_ce.logits_shape"],
                                                ["flat_ce.logits"], name="flat_ce.reshape_logits"))
            g.node.append(onnx.helper.make_node("Reshape", ["labels", "flat_ce.labels_shape"],
                                                ["flat_ce.labels"], name="flat_ce.reshape_labels"))
            return self.ce("flat_ce.logits", "flat_ce.labels")

    return FlatCrossEntropy()


def _torch_adamw(optimizer_path):
    """onnxblock.optim.AdamW writes its AdamWOptimizer node with adam_mode 1 (the transformers
    library's AdamW: weight decay after the step, eps outside the bias correction). Set mode 0,
    the kernel's PyTorch form (decay p *= 1 - lr * wd before the step, bias-corrected
    denominator), which torch.optim.AdamW and onnxdp's adamw use."""
    import onnx
    m = onnx.load(optimizer_path)
    nodes = [n for n in m.graph.node if n.op_type == "AdamWOptimizer"]
    if len(nodes) != 1:
        raise RuntimeError(f"{optimizer_path}: expected one AdamWOptimizer node, found {len(nodes)}")
    for attr in nodes[0].attribute:
        if attr.name == "adam_mode":
            attr.i = 0
    onnx.save(m, optimizer_path)


def _layernorm_statistics_outputs(model):
    """Workaround: ORT's gradient of LayerNormalization reads the node's optional Mean and
    InvStdDev outputs (outputs 1 and 2), which the exporters leave out; without them
    generate_artifacts fails with `GradientBuilderBase::O(size_t, bool) const i <
    node_->OutputDefs().size() was false`. Give each such node those two outputs (unused by the
    rest of the graph, so the model computes the same). Returns how many nodes changed."""
    changed = 0
    for node in model.graph.node:
        if node.op_type == "LayerNormalization" and len(node.output) == 1:
            node.output.extend([node.output[0] + ".mean", node.output[0] + ".inv_std_dev"])
            changed += 1
    return changed


# Known failures of generate_artifacts on exported models, and what makes it work: (what the
# error says, the workaround). Tried only after the file as exported has failed, and recorded.
WORKAROUNDS = [
    ("i < node_->OutputDefs().size() was false", _layernorm_statistics_outputs),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--input", required=True, help="the graph input that takes the data's samples")
    ap.add_argument("--data", required=True)
    ap.add_argument("--trainable", required=True, help="JSON list of the initializers to train")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--work", required=True, help="folder for the training artifacts")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    stage = "import"
    res = {}
    try:
        import numpy as np
        import onnx
        import onnxruntime as ort
        from onnxruntime.training import artifacts, onnxblock
        from onnxruntime.training.api import CheckpointState, Module, Optimizer
        res["onnxruntime"] = ort.__version__
        res["onnx"] = onnx.__version__

        stage = "generate_artifacts"
        with open(a.trainable) as f:
            trainable = json.load(f)
        model = onnx.load(a.onnx)
        frozen = [i.name for i in model.graph.initializer if i.name not in set(trainable)]
        os.makedirs(a.work, exist_ok=True)
        t0 = time.perf_counter()

        def generate():
            cwd = os.getcwd()
            os.chdir(a.work)  # onnxblock writes a temporary file into the current folder
            try:
                artifacts.generate_artifacts(
                    model, requires_grad=trainable, frozen_params=frozen, loss=_flat_cross_entropy(),
                    optimizer=onnxblock.optim.AdamW(eps=1e-8, weight_decay=0.01), artifact_directory=a.work)
            finally:
                os.chdir(cwd)

        try:
            generate()
        except Exception as e:
            fixes = [fix for text, fix in WORKAROUNDS if text in str(e)]
            changed = [(fix.__name__, fix(model)) for fix in fixes]
            if not any(n for _, n in changed):
                raise
            res["failed_as_exported"] = f"{type(e).__name__}: {str(e).strip()[:600]}"
            res["workarounds"] = [f"{name} ({n} nodes)" for name, n in changed if n]
            print(f"generate_artifacts failed on the file as exported; retrying with {res['workarounds']}",
                  file=sys.stderr)
            generate()
        _torch_adamw(os.path.join(a.work, "optimizer_model.onnx"))
        res["generate_s"] = time.perf_counter() - t0

        stage = "session"
        so = ort.SessionOptions()
        so.intra_op_num_threads = a.threads
        so.inter_op_num_threads = 1
        state = CheckpointState.load_checkpoint(os.path.join(a.work, "checkpoint"))
        # No eval model: it is not needed to train, and ORT cannot load the one it generates for a
        # graph with training-mode BatchNormalization (its 3 outputs fail eval-mode shape inference).
        module = Module(os.path.join(a.work, "training_model.onnx"), state, device="cpu", session_options=so)
        opt = Optimizer(os.path.join(a.work, "optimizer_model.onnx"), module)
        opt.set_learning_rate(a.lr)
        module.train()

        stage = "train"
        data = np.load(a.data)
        x_all, y_all = data[a.input], data["label"]
        n = x_all.shape[0]
        losses = []
        cursor = 0
        t0 = time.perf_counter()
        for _ in range(a.steps):
            if cursor >= n:
                cursor = 0
            x = np.ascontiguousarray(x_all[cursor:cursor + a.batch])
            y = np.ascontiguousarray(y_all[cursor:cursor + a.batch])
            cursor += a.batch
            loss = module(x, y)  # forward and backward; the gradients accumulate in the module
            opt.step()
            module.lazy_reset_grad()
            losses.append(float(loss))
        res["loop_s"] = time.perf_counter() - t0
        res["losses"] = losses
        res["threads"] = a.threads
    except Exception as e:  # the record keeps what ORT could not do, and at which stage
        res["error"] = f"{stage}: {type(e).__name__}: {str(e).strip()[:1500]}"
        traceback.print_exc()
    with open(a.out, "w") as f:
        json.dump(res, f)
    return 3 if "error" in res else 0


if __name__ == "__main__":
    sys.exit(main())
