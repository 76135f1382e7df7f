// THE op table. One row per op; the enum, names, arity checks, attribute schemas and every
// dispatch table (ONNX import, shape rules, gradients, CPU kernels, the CUDA backend) derive from it.
//
// Adding an op touches these places and no others (C is the row's category column):
//   row       graph/op_table.h          its row below, and ONNXDP_OP_COUNT
//   import    nothing when the ONNX node is already onnxdp's form: the default import takes it as
//             read (importer/importer.h). Otherwise import_<Op> in importer/ops_C.cpp (opset forms
//             normalised to one) and its name in importer/importer.h's ONNXDP_IMPORTS
//   shape     graph/shapes_C.cpp        shape_<Op>
//   gradient  graph/gradients_C.cpp     grad_<Op> (no_gradient / gradient_missing say so explicitly)
//   CPU       exec/cpu/C.cpp            <Op>_forward, the reference kernel; elementwise math is a
//             functor in exec/functors.h (host and device), which <Op>_forward applies
//   CUDA      exec/cuda/ops.h           the op's line (the op table's CUDA column): an elementwise
//             op names its family and functor, nothing more; another names its kernel group,
//             whose file gets the kernel (exec/cuda/<group>.*). No line: the CPU kernel with
//             copies (Plan::host_ops)
//   tests     tests/ops/test_C.cpp      the kernel's values from an independent source (numpy,
//             PyTorch), pasted with how they were computed; the ONNX node tests with
//             optest::check_node_tests (tests/conformance/ runs them too, as soon as the row
//             exists: >= 98 % over claimed ops, tests/conformance/exclusions.txt says why a case
//             cannot pass)
//             tests/graph/test_autodiff*.cpp  the gradient against float64 finite differences
//             (gradcheck)
//             tests/gpu/test_cuda_<group>.cpp the CUDA kernel against the CPU, on the GPU and
//             emulated (elementwise ops: test_cuda_elementwise.cpp; reduce and the copies:
//             test_cuda_ops.cpp)
// A unary elementwise op is thus: its row, shape rule, gradient, functor, <Op>_forward, CUDA line
// and tests. An op that is a few existing rows is a composite instead (ONNXDP_COMPOSITES below):
// its import only.
//
// Attribute schema: comma-separated `name:kind[=default]`, kind one of
//   i (int64), f (float), s (string), ints, floats, t (tensor).
// An attribute without a default is optional and read with Node::has().
// Inputs: min..max (optional trailing inputs may be absent); outputs likewise.
//
//  X(Op,                        C,         in_min, in_max, out_min, out_max, attributes)
#define ONNXDP_OPS(X)                                                                              \
  X(Add,                        math,       2, 2, 1, 1, "blocked_inputs:ints,blocked_outputs:ints") \
  X(Sub,                        math,       2, 2, 1, 1, "blocked_inputs:ints,blocked_outputs:ints") \
  X(Mul,                        math,       2, 2, 1, 1, "blocked_inputs:ints,blocked_outputs:ints") \
  X(Div,                        math,       2, 2, 1, 1, "blocked_inputs:ints,blocked_outputs:ints") \
  X(Pow,                        math,       2, 2, 1, 1, "")                                         \
  X(Min,                        math,       1, 64, 1, 1, "")                                        \
  X(Max,                        math,       1, 64, 1, 1, "")                                        \
  X(Sqrt,                       math,       1, 1, 1, 1, "")                                         \
  X(Exp,                        math,       1, 1, 1, 1, "")                                         \
  X(Log,                        math,       1, 1, 1, 1, "")                                         \
  X(Neg,                        math,       1, 1, 1, 1, "")                                         \
  X(Abs,                        math,       1, 1, 1, 1, "")                                         \
  X(Reciprocal,                 math,       1, 1, 1, 1, "")                                         \
  X(Relu,                       math,       1, 1, 1, 1, "")                                         \
  X(LeakyRelu,                  math,       1, 1, 1, 1, "alpha:f=0.01")                             \
  X(Sigmoid,                    math,       1, 1, 1, 1, "")                                         \
  X(Tanh,                       math,       1, 1, 1, 1, "")                                         \
  X(Erf,                        math,       1, 1, 1, 1, "")                                         \
  X(Gelu,                       math,       1, 1, 1, 1, "approximate:s=none")                       \
  X(Softplus,                   math,       1, 1, 1, 1, "")                                         \
  X(Sin,                        math,       1, 1, 1, 1, "")                                         \
  X(Cos,                        math,       1, 1, 1, 1, "")                                         \
  X(HardSigmoid,                math,       1, 1, 1, 1, "alpha:f=0.2,beta:f=0.5")                   \
  X(HardSwish,                  math,       1, 1, 1, 1, "")                                         \
  X(Mod,                        math,       2, 2, 1, 1, "fmod:i=0")                                 \
  X(Elu,                        math,       1, 1, 1, 1, "alpha:f=1")                                \
  X(Selu,                       math,       1, 1, 1, 1,                                             \
    "alpha:f=1.67326319217681884765625,gamma:f=1.05070102214813232421875")                          \
  X(Celu,                       math,       1, 1, 1, 1, "alpha:f=1")                                \
  X(Mish,                       math,       1, 1, 1, 1, "")                                         \
  X(Softsign,                   math,       1, 1, 1, 1, "")                                         \
  X(Sign,                       math,       1, 1, 1, 1, "")                                         \
  X(PRelu,                      math,       2, 2, 1, 1, "")                                         \
  X(CumSum,                     math,       2, 2, 1, 1, "exclusive:i=0,reverse:i=0")                \
  X(Clip,                       math,       1, 3, 1, 1, "")                                         \
  X(Softmax,                    math,       1, 1, 1, 1, "axis:i=-1")                                \
  X(LogSoftmax,                 math,       1, 1, 1, 1, "axis:i=-1")                                \
  X(MatMul,                     math,       2, 2, 1, 1, "")                                         \
  X(Gemm,                       math,       2, 3, 1, 1,                                             \
    "alpha:f=1,beta:f=1,transA:i=0,transB:i=0")                                                     \
  X(Equal,                      logical,    2, 2, 1, 1, "")                                         \
  X(Less,                       logical,    2, 2, 1, 1, "")                                         \
  X(Greater,                    logical,    2, 2, 1, 1, "")                                         \
  X(Not,                        logical,    1, 1, 1, 1, "")                                         \
  X(LessOrEqual,                logical,    2, 2, 1, 1, "")                                         \
  X(GreaterOrEqual,             logical,    2, 2, 1, 1, "")                                         \
  X(And,                        logical,    2, 2, 1, 1, "")                                         \
  X(Or,                         logical,    2, 2, 1, 1, "")                                         \
  X(Xor,                        logical,    2, 2, 1, 1, "")                                         \
  X(Where,                      logical,    3, 3, 1, 1, "")                                         \
  /* IsNaN / IsInf (x float) -> bool; IsInf counts -inf / +inf as its detect_* attributes say. */ \
  X(IsNaN,                      logical,    1, 1, 1, 1, "")                                         \
  X(IsInf,                      logical,    1, 1, 1, 1, "detect_negative:i=1,detect_positive:i=1")  \
  /* blocked_inputs / blocked_outputs (Conv, ConvTranspose, ConvGradFilter, BatchNormalization    */ \
  /* and its gradient; Add, Sub, Mul, Div, Expand, Transpose, ReduceSum, ReduceMean): onnxdp's    */ \
  /* own, the slots in the CPU's channel-blocked layout (graph/passes/block_channels.h; import    */ \
  /* refuses them).                                                                               */ \
  X(Conv,                       nn,         2, 3, 1, 1,                                             \
    "auto_pad:s=NOTSET,blocked_inputs:ints,blocked_outputs:ints,dilations:ints,group:i=1,"         \
    "kernel_shape:ints,pads:ints,strides:ints")                                                     \
  X(ConvTranspose,              nn,         2, 3, 1, 1,                                             \
    "auto_pad:s=NOTSET,blocked_inputs:ints,blocked_outputs:ints,dilations:ints,group:i=1,"         \
    "kernel_shape:ints,output_padding:ints,output_shape:ints,pads:ints,strides:ints")               \
  X(MaxPool,                    nn,         1, 1, 1, 2,                                             \
    "auto_pad:s=NOTSET,ceil_mode:i=0,dilations:ints,kernel_shape:ints,pads:ints,"                  \
    "storage_order:i=0,strides:ints")                                                               \
  X(AveragePool,                nn,         1, 1, 1, 1,                                             \
    "auto_pad:s=NOTSET,ceil_mode:i=0,count_include_pad:i=0,dilations:ints,kernel_shape:ints,"      \
    "pads:ints,strides:ints")                                                                       \
  X(GlobalAveragePool,          nn,         1, 1, 1, 1, "")                                         \
  /* unbiased_running_var: onnxdp's own, not ONNX (import refuses it: importer/ops_nn.cpp).      */ \
  /* The trainer (train/trainer.cpp) sets it on training-mode nodes: output 2 (running_var)      */ \
  /* then takes the batch variance times n/(n-1), n = elements per channel over the global       */ \
  /* batch, as PyTorch (n = 1: the biased 0); y keeps the biased one. Kernels: exec/cpu/         */ \
  /* norm.cpp, exec/cuda/norm_launch.h; global BN: parallel/data_parallel.cpp. activation       */ \
  /* (onnxdp's own too): none or Relu applied to y, a Relu that alone reads y fused in           */ \
  /* (graph/passes/fuse_epilogues.h).                                                             */ \
  X(BatchNormalization,         nn,         5, 5, 1, 3,                                             \
    "activation:s=,blocked_inputs:ints,blocked_outputs:ints,epsilon:f=1e-05,momentum:f=0.9,"       \
    "training_mode:i=0,unbiased_running_var:i=0")                                                   \
  X(LayerNormalization,         nn,         2, 3, 1, 3, "axis:i=-1,epsilon:f=1e-05,stash_type:i=1") \
  X(Dropout,                    nn,         1, 3, 1, 2, "seed:i,ratio:f=0.5,training_mode:i=0")     \
  X(SoftmaxCrossEntropyLoss,    nn,         2, 3, 1, 2, "ignore_index:i,reduction:s=mean")          \
  X(NegativeLogLikelihoodLoss,  nn,         2, 3, 1, 1, "ignore_index:i,reduction:s=mean")          \
  X(Identity,                   tensor,     1, 1, 1, 1, "")                                         \
  X(Cast,                       tensor,     1, 1, 1, 1, "saturate:i=1,to:i")                        \
  X(CastLike,                   tensor,     2, 2, 1, 1, "saturate:i=1")                             \
  X(Shape,                      tensor,     1, 1, 1, 1, "end:i,start:i=0")                          \
  X(Size,                       tensor,     1, 1, 1, 1, "")                                         \
  X(Flatten,                    tensor,     1, 1, 1, 1, "axis:i=1")                                 \
  X(Reshape,                    tensor,     2, 2, 1, 1, "allowzero:i=0")                            \
  X(Transpose,                  tensor,     1, 1, 1, 1,                                             \
    "blocked_inputs:ints,blocked_outputs:ints,perm:ints")                                           \
  X(Squeeze,                    tensor,     1, 2, 1, 1, "")                                         \
  X(Unsqueeze,                  tensor,     2, 2, 1, 1, "")                                         \
  X(Concat,                     tensor,     1, 1024, 1, 1, "axis:i")                                \
  X(Split,                      tensor,     1, 2, 1, 1024, "axis:i=0,num_outputs:i")                \
  X(Slice,                      tensor,     3, 5, 1, 1, "")                                         \
  X(Gather,                     tensor,     2, 2, 1, 1, "axis:i=0")                                 \
  X(GatherElements,             tensor,     2, 2, 1, 1, "axis:i=0")                                 \
  /* GatherND (data, indices [.., k]) -> data's slices at the k-tuples, after batch_dims shared  */ \
  /* leading dims; ScatterND (data, indices [.., k], updates) -> data with the slices written in */ \
  /* index order (`reduction` none, add, mul, max, min).                                          */ \
  X(GatherND,                   tensor,     2, 2, 1, 1, "batch_dims:i=0")                           \
  X(ScatterND,                  tensor,     3, 3, 1, 1, "reduction:s=none")                         \
  /* OneHot (indices, depth: constant scalar, values [off, on]) -> values' dtype, a new axis    */ \
  /* of size depth at `axis`; negative indices count from the end, out-of-range ones give off.  */ \
  X(OneHot,                     tensor,     3, 3, 1, 1, "axis:i=-1")                                \
  X(Expand,                     tensor,     2, 2, 1, 1, "blocked_inputs:ints,blocked_outputs:ints") \
  X(Tile,                       tensor,     2, 2, 1, 1, "")                                         \
  X(Pad,                        tensor,     2, 4, 1, 1, "mode:s=constant")                          \
  X(Trilu,                      tensor,     1, 2, 1, 1, "upper:i=1")                                \
  /* Resize (x, roi, scales, sizes): modes nearest, linear, cubic (graph/resize.h); roi, scales  */ \
  /* and sizes known.                                                                             */ \
  X(Resize,                     tensor,     1, 4, 1, 1,                                             \
    "antialias:i=0,axes:ints,coordinate_transformation_mode:s=half_pixel,cubic_coeff_a:f=-0.75,"    \
    "exclude_outside:i=0,extrapolation_value:f=0,keep_aspect_ratio_policy:s=stretch,mode:s=nearest," \
    "nearest_mode:s=round_prefer_floor")                                                            \
  X(Constant,                   generator,  0, 0, 1, 1, "value:t")                                  \
  X(ConstantOfShape,            generator,  1, 1, 1, 1, "value:t")                                  \
  X(Range,                      generator,  3, 3, 1, 1, "")                                         \
  X(ReduceMean,                 reduction,  1, 2, 1, 1,                                             \
    "blocked_inputs:ints,keepdims:i=1,noop_with_empty_axes:i=0")                                    \
  X(ReduceSum,                  reduction,  1, 2, 1, 1,                                             \
    "blocked_inputs:ints,keepdims:i=1,noop_with_empty_axes:i=0")                                    \
  X(ReduceMax,                  reduction,  1, 2, 1, 1, "keepdims:i=1,noop_with_empty_axes:i=0")    \
  X(ReduceMin,                  reduction,  1, 2, 1, 1, "keepdims:i=1,noop_with_empty_axes:i=0")    \
  X(ReduceProd,                 reduction,  1, 2, 1, 1, "keepdims:i=1,noop_with_empty_axes:i=0")    \
  X(ArgMax,                     reduction,  1, 1, 1, 1, "axis:i=0,keepdims:i=1,select_last_index:i=0") \
  X(ArgMin,                     reduction,  1, 1, 1, 1, "axis:i=0,keepdims:i=1,select_last_index:i=0") \
  /* TopK (x, K: constant [1] int64) -> (values, int64 indices) along `axis`; ties: lower index */ \
  /* first (ONNX's reference). Opsets < 10 give k as an attribute (moved to input 1 on import).  */ \
  X(TopK,                       reduction,  2, 2, 2, 2, "axis:i=-1,largest:i=1,sorted:i=1")         \
  /* Collectives (domain onnxdp), inserted by the data-parallel pass (parallel/data_parallel.h): */ \
  /* Scatter: this replica's `rows` rows of the global batch, from row RunState::batch_offset.   */ \
  X(Scatter,                    collective, 1, 1, 1, 1, "rows:i")                                   \
  /* AllReduce: elementwise sum over all replicas of each input (a bucket: k inputs, k outputs); */ \
  /* async=1: started on the communication thread, finished by the end of the run (gradients).  */ \
  X(AllReduce,                  collective, 1, 1024, 1, 1024, "async:i=0")                          \
  /* AllGather: the replicas' shards concatenated along axis 0 (`rows` = the global batch).      */ \
  X(AllGather,                  collective, 1, 1, 1, 1, "rows:i")                                   \
  /* ReduceScatter: AllReduce's bucket for --zero-stage 1: each output holds the sum over the   */ \
  /* replicas on the elements this replica owns (RunState::shards: its part of the flat gradient */ \
  /* buffer), elsewhere its input or the sum; async as AllReduce. Outside the flat buffer: sums. */ \
  X(ReduceScatter,              collective, 1, 1024, 1, 1024, "async:i=0")                          \
  /* ---- internal gradient ops: emitted by gradient rules, not ONNX, not importable ---------- */ \
  /* ConvGradFilter (x [N,C,D..], dy [N,M,O..]) -> dW [M, C/group, k..]; explicit pads       */ \
  /* (begins, ends), kernel_shape required. Conv's weight gradient (ConvTranspose's, swapped).   */ \
  X(ConvGradFilter,             grad,       2, 2, 1, 1,                                             \
    "blocked_inputs:ints,dilations:ints,group:i=1,kernel_shape:ints,pads:ints,strides:ints")        \
  /* MaxPoolGrad (x, dy) -> dx: dy routed to each window's first maximum; MaxPool's attrs.    */ \
  X(MaxPoolGrad,                grad,       2, 2, 1, 1,                                             \
    "auto_pad:s=NOTSET,ceil_mode:i=0,dilations:ints,kernel_shape:ints,pads:ints,strides:ints")     \
  /* AveragePoolGrad (dy, x_shape: int64 constant) -> dx: dy spread over each window.        */ \
  X(AveragePoolGrad,            grad,       2, 2, 1, 1,                                             \
    "auto_pad:s=NOTSET,ceil_mode:i=0,count_include_pad:i=0,dilations:ints,kernel_shape:ints,"      \
    "pads:ints,strides:ints")                                                                       \
  /* BatchNormalizationGrad (dy, x, scale, relu_y?) -> (dx, dscale, dbias): training mode,   */ \
  /* batch mean and biased variance recomputed; with relu_y (x's shape) dy is first taken as   */ \
  /* ReluGrad(dy, relu_y): BatchNormalization + Relu backward in one pass (fuse_relu_grad).    */ \
  X(BatchNormalizationGrad,     grad,       3, 4, 1, 3,                                             \
    "blocked_inputs:ints,blocked_outputs:ints,epsilon:f=1e-05")                                     \
  /* LayerNormalizationGrad (dy, x, scale) -> (dx, dscale, dbias), the last two shaped        */ \
  /* x.shape[axis:]; statistics recomputed.                                                   */ \
  X(LayerNormalizationGrad,     grad,       3, 3, 1, 3, "axis:i=-1,epsilon:f=1e-05")                \
  /* GatherGrad (dy, indices, data_shape: int64 constant) -> ddata: scatter-add along axis.   */ \
  X(GatherGrad,                 grad,       3, 3, 1, 1, "axis:i=0")                                 \
  /* GatherElementsGrad (dy, indices, data_shape: int64 constant) -> ddata: dy added at the      */ \
  /* elements GatherElements read, in element order (deterministic).                             */ \
  X(GatherElementsGrad,         grad,       3, 3, 1, 1, "axis:i=0")                                 \
  /* GatherNDGrad (dy, indices, data_shape: int64 constant) -> ddata: dy's slices added where   */ \
  /* GatherND read them, in index order (deterministic).                                          */ \
  X(GatherNDGrad,               grad,       3, 3, 1, 1, "batch_dims:i=0")                           \
  /* ResizeGrad (dy, x_shape: int64 constant, roi?, scales?, sizes?) -> dx: the adjoint of        */ \
  /* Resize linear / cubic (its inputs 1..3 and attributes): dy scattered back with the          */ \
  /* interpolation weights, axis by axis in reverse (deterministic).                              */ \
  X(ResizeGrad,                 grad,       2, 5, 1, 1,                                             \
    "antialias:i=0,axes:ints,coordinate_transformation_mode:s=half_pixel,cubic_coeff_a:f=-0.75,"    \
    "exclude_outside:i=0,extrapolation_value:f=0,keep_aspect_ratio_policy:s=stretch,mode:s=nearest," \
    "nearest_mode:s=round_prefer_floor")                                                            \
  /* SoftmaxCrossEntropyLossGrad (dy, scores, labels, weights?) -> dscores.                   */ \
  X(SoftmaxCrossEntropyLossGrad, grad,      3, 4, 1, 1, "ignore_index:i,reduction:s=mean")          \
  /* NegativeLogLikelihoodLossGrad (dy, labels, x_shape: int64 constant, weights?) -> dx.     */ \
  X(NegativeLogLikelihoodLossGrad, grad,    3, 4, 1, 1, "ignore_index:i,reduction:s=mean")          \
  /* GeluGrad (dy, x) -> (dx, db?): dx = dy * Gelu'(x), `approximate` none or tanh: PyTorch's  */ \
  /* gelu_backward formulas, one pass (exec/functors.h); db [N], optional: dx summed over all   */ \
  /* dims but the last N, as ReduceSum sums (the bias gradient of the Linear before the GELU,   */ \
  /* graph/passes/fuse_bias_grad.h; CPU only).                                                */ \
  X(GeluGrad,                   grad,       2, 2, 1, 2, "approximate:s=none")                       \
  /* ReluGrad (dy, y) -> dx = dy where y > 0, else 0, y Relu's output: PyTorch's                */ \
  /* threshold_backward (y <= 0 ? 0 : dy, so a NaN y passes dy), one pass (exec/functors.h).   */ \
  X(ReluGrad,                   grad,       2, 2, 1, 1, "")                                         \
  /* ClipGrad (dy, x, min?, max?) -> dx = dy where min <= x <= max (an absent bound: no limit  */ \
  /* there), else 0: Clip's gradient as its rule writes it (Where (x < min, 0, ..), Where (x >   */ \
  /* max, 0, ..): PyTorch's clamp_backward, a NaN x passes dy) in one pass; bounds as Clip's    */ \
  /* (graph/passes/fuse_clip_grad.h; CPU only).                                                 */ \
  X(ClipGrad,                   grad,       2, 4, 1, 1, "")                                         \
  /* SoftmaxGrad (dy, y, mask?) -> dx = y * (dy - sum(dy * y, axis)), y Softmax's output;      */ \
  /* LogSoftmaxGrad (dy, y) -> dx = dy - exp(y) * sum(dy, axis), y LogSoftmax's output. One    */ \
  /* pass for the sums, one for dx. SoftmaxGrad's mask (bool, broadcast to y; the last axis     */ \
  /* only; CPU only): dx is 0 where mask == fill_when, MaskedSoftmax's gradient through its     */ \
  /* Where (graph/passes/fuse_masked_softmax.h).                                                */ \
  X(SoftmaxGrad,                grad,       2, 3, 1, 1, "axis:i=-1,fill_when:i=1")                  \
  X(LogSoftmaxGrad,             grad,       2, 2, 1, 1, "axis:i=-1")                                \
  /* FusedAttentionGrad (dy, q, k, v, p, mask?) -> (dq, dk, dv): FusedAttention's gradient,    */ \
  /* from its inputs, attributes and saved probabilities p; each gradient in its input's       */ \
  /* layout. heads 2: (dy, qkv, -, -, p, mask?) -> dqkv.                                        */ \
  X(FusedAttentionGrad,         grad,       5, 6, 1, 3,                                             \
    "fill:f,fill_when:i=1,heads:i=0,nan_to_zero:i=0,num_heads:i=0,scale:f=1")                      \
  /* ---- internal fused ops: made by graph/passes/ (fuse_epilogues and fuse_masked_softmax     */ \
  /* after autodiff, without a gradient; fuse_attention before it), not ONNX, not importable;   */ \
  /* their pieces live with the op they extend ------------------------------------------------ */ \
  /* FusedGemm: Gemm (its inputs and attributes) with `activation` applied to Y, Relu only; on  */ \
  /* CUDA one cuBLASLt call with the activation (and a bias) as its epilogue.                  */ \
  X(FusedGemm,                  math,       2, 3, 1, 1,                                             \
    "alpha:f=1,beta:f=1,transA:i=0,transB:i=0,activation:s=Relu")                                  \
  /* FusedMatMul (A [.., M, K], B [.., K, N], batch dims broadcast; transA / transB: that      */ \
  /* operand stored with its last two dims swapped; bias [N]?) -> alpha * MatMul + bias, then    */ \
  /* `activation` (none or Relu): a Linear layer on N-D input as exported (MatMul, Add), a       */ \
  /* product reading a transposed operand as stored (graph/passes/fold_transposes.h), a product  */ \
  /* scaled by a constant (graph/passes/fold_scales.h); on CUDA one cuBLAS / cuBLASLt call.      */ \
  X(FusedMatMul,                math,       2, 3, 1, 1,                                             \
    "alpha:f=1,activation:s=,transA:i=0,transB:i=0")                                               \
  /* MaskedSoftmax (x, mask) -> Softmax(Where(mask, fill, x)) along the last axis (fill_when 1; */ \
  /* 0: Where(mask, x, fill)), mask bool broadcast to x: attention's masked scores in one pass  */ \
  /* (graph/passes/fuse_masked_softmax.h; CPU only).                                            */ \
  X(MaskedSoftmax,              math,       2, 2, 1, 1, "axis:i=-1,fill:f,fill_when:i=1")              \
  /* FusedAttention (q, k, v, mask?) -> (y, p): p = Softmax(Where(mask, fill, scale * q @ kt))  */ \
  /* along the last axis (fill_when 0: Where(mask, x, fill)), y = p @ v (nan_to_zero 1:         */ \
  /* Where(IsNaN(p), 0, p) @ v); p is kept for the gradient. heads 0: q [N.., Tq, D], k given   */ \
  /* as kt [N.., D, Tk], v [N.., Tk, Dv], y [N.., Tq, Dv]; heads 1, the head transposes read in  */ \
  /* place: q [B, Tq, H, D], k [B, Tk, H, D], v [B, Tk, H, Dv], y [B, Tq, H, Dv]; heads 2, q, k  */ \
  /* and v read where a Linear layer wrote them: input 0 qkv [B, T, 3 * H * D] (H num_heads),     */ \
  /* inputs 1 and 2 absent, y [B, T, H, D]. p [N.., Tq, Tk] ([B, H, Tq, Tk]); the mask bool,      */ \
  /* broadcast to p (graph/attention.h). Made before autodiff by graph/passes/fuse_attention.h   */ \
  /* (CPU graphs only); its gradient is one FusedAttentionGrad. Not ONNX's Attention (opset 23), */ \
  /* which onnxdp does not import.                                                               */ \
  X(FusedAttention,             math,       3, 4, 2, 2,                                             \
    "fill:f,fill_when:i=1,heads:i=0,nan_to_zero:i=0,num_heads:i=0,scale:f=1")

// The number of rows: adding an op means adding its row and updating this count, which makes the
// compiler point at every table derived from the rows.
#define ONNXDP_OP_COUNT 119

// Composite ops: ONNX ops onnxdp imports as a few rows of the table above, so their shape rules,
// gradients and kernels (CPU and CUDA) are those rows'. import_<Op> in importer/ops_<C>.cpp gets
// the node as op `As` with the ONNX node's inputs and attributes, adds helper nodes ahead of it
// and makes the node itself the last step; tests in tests/ops/test_<C>.cpp. An op with several
// outputs binds those the node itself does not make to helper values (ImportCtx::bind_output),
// which then carry the ONNX output names. A composite that needs a static shape (the recurrent
// ops unroll over the sequence) reads it with ImportCtx::static_shape.
//
//  X(Op,                        C,          As)
#define ONNXDP_COMPOSITES(X)                                                                       \
  /* sum(x^2), sum|x|, sqrt(sum(x^2)), log(sum(x)), log(sum(exp(x - max))) + max                  */ \
  X(ReduceSumSquare,            reduction,  ReduceSum)                                             \
  X(ReduceL1,                   reduction,  ReduceSum)                                             \
  X(ReduceL2,                   reduction,  ReduceSum)                                             \
  X(ReduceLogSum,               reduction,  ReduceSum)                                             \
  X(ReduceLogSumExp,            reduction,  ReduceSum)                                             \
  /* (x - mean) / sqrt(var + epsilon) * scale + B over the spatial dims (a torch GroupNorm's      */ \
  /* export too); the axes come from Shape / Size / Range, folded to constants at load           */ \
  X(InstanceNormalization,      nn,         Add)                                                   \
  /* The recurrent ops, unrolled over the time steps (the sequence length is static once the    */ \
  /* shapes are): per step MatMul, Add, Split, the gate activations (Sigmoid, Tanh, Relu ...),  */ \
  /* Mul, Sub, Where for sequence_lens; the node itself is the Concat that stacks Y. Y_h (and   */ \
  /* LSTM's Y_c) are bound outputs. Forward, reverse, bidirectional; layout 0 and 1.            */ \
  X(LSTM,                       rnn,        Concat)                                                \
  X(GRU,                        rnn,        Concat)                                                \
  X(RNN,                        rnn,        Concat)                                                \
  /* DepthToSpace (DCR / CRD) and SpaceToDepth: Reshape -> Transpose -> Reshape, static shapes    */ \
  X(DepthToSpace,               tensor,     Reshape)                                               \
  X(SpaceToDepth,               tensor,     Reshape)                                               \
  /* Einsum: the equation lowered to Transpose / Reshape / MatMul / ReduceSum / Mul, operands     */ \
  /* folded left to right (importer/ops_math.cpp)                                                 */ \
  X(Einsum,                     math,       MatMul)

// Notes on normalised inputs (the importer turns attribute forms of older opsets into these):
//   Squeeze/Unsqueeze/Reduce*: axes as input 1.  Split: sizes as input 1.  Clip: min/max as
//   inputs 1/2.  Pad: pads input 1, constant_value input 2, axes input 3.
