// The op table's CUDA column: which rows of graph/op_table.h have a CUDA kernel, and which kernel
// family runs them. exec/cuda/backend.cpp's has_kernel and dispatch, the elementwise kernels'
// op enum (EwOp) and their dispatch (exec/cuda/elementwise.cu) all derive from these lists; a row
// named in neither runs its CPU kernel with copies (Plan::host_ops). Macros only, no includes:
// nvcc and the host compiler both read it.
//
// Adding a unary elementwise op is one line in ONNXDP_CUDA_ELEMENTWISE naming its functor of
// exec/functors.h (the one its CPU kernel runs); its GPU test is a line in
// tests/gpu/test_cuda_elementwise.cpp.
#pragma once

// Rows run by the elementwise kernels (exec/cuda/elementwise.*), with the functor they apply:
//   X(Op, family, functor)
// family (exec/cuda/elementwise.cu) says which element types the kernel is instantiated for:
//   unary_number, binary_number   f32, f64, i32, i64
//   unary_float, binary_float     f32, f64
//   compare                       numbers and bool -> bool
//   logical_unary, logical_binary bool -> bool
//   float_test                    f32, f64 -> bool
//   pow                           base f32 / f64, exponent f32 / f64 / i32 / i64
//   identity                      numbers, and 16-bit floats as their bits
//   clip                          numbers, the bounds of the input's type (the functor column is
//                                 the launch, whose clip_lo / clip_hi the family reads)
//   where                         any element type, copied by size
// The functor is an expression; `l` is the EwLaunch (exec/cuda/elementwise_launch.h), whose fields
// carry the row's attributes (set by name from the row's schema: alpha, beta, gamma, fmod,
// detect_negative / detect_positive). A binary row with more inputs (Min, Max) folds them pairwise.
#define ONNXDP_CUDA_ELEMENTWISE(X)                                  \
  X(Add,              binary_number,   fn::Add{})                   \
  X(Sub,              binary_number,   fn::Sub{})                   \
  X(Mul,              binary_number,   fn::Mul{})                   \
  X(Div,              binary_number,   fn::Div{})                   \
  X(Pow,              pow,             fn::Pow{})                   \
  X(Min,              binary_number,   fn::Min{})                   \
  X(Max,              binary_number,   fn::Max{})                   \
  X(Mod,              binary_number,   fn::Mod{l.fmod})             \
  X(PRelu,            binary_number,   fn::PRelu{})                 \
  X(Identity,         identity,        fn::Identity{})              \
  X(Neg,              unary_number,    fn::Neg{})                   \
  X(Abs,              unary_number,    fn::Abs{})                   \
  X(Relu,             unary_number,    fn::Relu{})                  \
  X(Sign,             unary_number,    fn::Sign{})                  \
  X(Clip,             clip,            l)                           \
  X(Sqrt,             unary_float,     fn::Sqrt{})                  \
  X(Exp,              unary_float,     fn::Exp{})                   \
  X(Log,              unary_float,     fn::Log{})                   \
  X(Reciprocal,       unary_float,     fn::Reciprocal{})            \
  X(LeakyRelu,        unary_float,     fn::LeakyRelu{l.alpha})      \
  X(Sigmoid,          unary_float,     fn::Sigmoid{})               \
  X(Tanh,             unary_float,     fn::Tanh{})                  \
  X(Erf,              unary_float,     fn::Erf{})                   \
  X(Gelu,             unary_float,     fn::Gelu{})                  \
  X(Softplus,         unary_float,     fn::Softplus{})              \
  X(Sin,              unary_float,     fn::Sin{})                   \
  X(Cos,              unary_float,     fn::Cos{})                   \
  X(HardSigmoid,      unary_float,     fn::HardSigmoid{l.alpha, l.beta}) \
  X(HardSwish,        unary_float,     fn::HardSwish{})             \
  X(Elu,              unary_float,     fn::Elu{l.alpha})            \
  X(Selu,             unary_float,     fn::Selu{l.alpha, l.gamma})  \
  X(Celu,             unary_float,     fn::Celu{l.alpha})           \
  X(Mish,             unary_float,     fn::Mish{})                  \
  X(Softsign,         unary_float,     fn::Softsign{})              \
  X(GeluGrad,         binary_float,    fn::GeluGrad{})              \
  X(ReluGrad,         binary_float,    fn::ReluGrad{})              \
  X(Equal,            compare,         fn::Equal{})                 \
  X(Less,             compare,         fn::Less{})                  \
  X(Greater,          compare,         fn::Greater{})               \
  X(LessOrEqual,      compare,         fn::LessOrEqual{})           \
  X(GreaterOrEqual,   compare,         fn::GreaterOrEqual{})        \
  X(And,              logical_binary,  fn::And{})                   \
  X(Or,               logical_binary,  fn::Or{})                    \
  X(Xor,              logical_binary,  fn::Xor{})                   \
  X(Not,              logical_unary,   fn::Not{})                   \
  X(IsNaN,            float_test,      fn::IsNaN{})                 \
  X(IsInf,            float_test,      fn::IsInf{l.inf_negative, l.inf_positive}) \
  X(Where,            where,           fn::Select{})

// Elementwise kernels a row picks by attribute (exec/cuda/elementwise.cpp's ew_op): Gelu and
// GeluGrad with approximate = "tanh". Not rows of the op table; the same columns.
#define ONNXDP_CUDA_ELEMENTWISE_FORMS(X)                            \
  X(GeluTanh,         unary_float,     fn::GeluTanh{})              \
  X(GeluTanhGrad,     binary_float,    fn::GeluTanhGrad{})

// The other rows with a CUDA kernel, by the group that runs them:
//   X(Op, family)
//   gemm        exec/cuda/gemm.*        cuBLAS / cuBLASLt
//   reduce      exec/cuda/reduce.*      reductions and the softmaxes
//   norm        exec/cuda/norm.*        the normalizations and losses
//   tensor      exec/cuda/tensor_ops.*  gathers, casts, copies of parts
//   conv        exec/cuda/conv.*        cuDNN convolutions, pooling
//   copy        exec/cuda/elementwise.* strided / broadcast copies on the Identity kernel
//   reshape     exec/cuda/backend.cpp   the same bytes under another shape (a device copy)
//   collective  exec/cuda/backend.cpp   NCCL (copies in a world of one)
#define ONNXDP_CUDA_KERNELS(X)                                      \
  X(MatMul,                         gemm)                           \
  X(Gemm,                           gemm)                           \
  X(FusedGemm,                      gemm)                           \
  X(FusedMatMul,                    gemm)                           \
  X(ReduceSum,                      reduce)                         \
  X(ReduceMean,                     reduce)                         \
  X(ReduceMax,                      reduce)                         \
  X(ReduceMin,                      reduce)                         \
  X(Softmax,                        reduce)                         \
  X(LogSoftmax,                     reduce)                         \
  X(SoftmaxGrad,                    reduce)                         \
  X(LogSoftmaxGrad,                 reduce)                         \
  X(LayerNormalization,             norm)                           \
  X(LayerNormalizationGrad,         norm)                           \
  X(BatchNormalization,             norm)                           \
  X(BatchNormalizationGrad,         norm)                           \
  X(SoftmaxCrossEntropyLoss,        norm)                           \
  X(SoftmaxCrossEntropyLossGrad,    norm)                           \
  X(NegativeLogLikelihoodLoss,      norm)                           \
  X(NegativeLogLikelihoodLossGrad,  norm)                           \
  X(Gather,                         tensor)                         \
  X(GatherGrad,                     tensor)                         \
  X(Cast,                           tensor)                         \
  X(CastLike,                       tensor)                         \
  X(Concat,                         tensor)                         \
  X(Split,                          tensor)                         \
  X(Slice,                          tensor)                         \
  X(Tile,                           tensor)                         \
  X(Pad,                            tensor)                         \
  X(Trilu,                          tensor)                         \
  X(Dropout,                        tensor)                         \
  X(Conv,                           conv)                           \
  X(ConvTranspose,                  conv)                           \
  X(ConvGradFilter,                 conv)                           \
  X(MaxPool,                        conv)                           \
  X(MaxPoolGrad,                    conv)                           \
  X(AveragePool,                    conv)                           \
  X(AveragePoolGrad,                conv)                           \
  X(GlobalAveragePool,              conv)                           \
  X(Transpose,                      copy)                           \
  X(Expand,                         copy)                           \
  X(Reshape,                        reshape)                        \
  X(Flatten,                        reshape)                        \
  X(Squeeze,                        reshape)                        \
  X(Unsqueeze,                      reshape)                        \
  X(Scatter,                        collective)                     \
  X(AllReduce,                      collective)                     \
  X(AllGather,                      collective)                     \
  X(ReduceScatter,                  collective)
