// fuse_bias_grad: the bias gradient of the Linear layer before a GELU, a ReduceSum of GeluGrad's
// dx over every dim but the last (keepdims 0: [N]), becomes GeluGrad's second output db: the sums
// are taken row by row while each row of dx is in cache (exec/cpu/grad.cpp), instead of a pass of
// their own that reads dx from memory again (gpt_small: 4 MB per layer and step). The sums are
// ReduceSum's, bit for bit: each column in row order, in double, from 0.
//
// Matched, on a finished training graph (after autodiff): ReduceSum(dx, axes) with axes a constant
// naming every dim of dx but the last (negative or not, in any order), keepdims 0, dx a float32
// or float64 output of a GeluGrad with one output, of rank 2 or more. dx stays (the products of
// the layer's backward read it). A ReduceSum's output that is kept stays as it is: it becomes
// GeluGrad's. Returns the number of ReduceSums fused.
//
// The CPU backend's graphs only (compile's CompileOptions::cpu): the CUDA elementwise kernels
// write one output.
#pragma once
#include <vector>

#include "graph/graph.h"

namespace onnxdp {

int fuse_bias_grad(Graph& g, const std::vector<ValueId>& keep = {});

}  // namespace onnxdp
