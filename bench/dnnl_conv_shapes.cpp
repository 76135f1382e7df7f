// The ResNet convolution shapes of bench/bench_models.py (batch 32) through oneDNN alone, one
// thread: GFLOP/s of the forward, backward-data and backward-weights passes, in plain NCHW layout
// (oneDNN's gemm path) and in the layouts oneDNN picks ("any": blocked, 16 channels innermost),
// the latter with the reorders from and to NCHW counted, as exec/cpu/onednn.cpp runs them.
// Informational (bench/results/2026-12-05-conv-engines.md); not part of the build:
//   g++ -O2 -std=c++17 bench/dnnl_conv_shapes.cpp -ldnnl -o /tmp/dnnl_conv_shapes
//   OMP_NUM_THREADS=1 /tmp/dnnl_conv_shapes
#include <oneapi/dnnl/dnnl.hpp>
#include <chrono>
#include <cstdio>
#include <vector>
using namespace dnnl;
using tag = memory::format_tag; using dt = memory::data_type;
static double now(){return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();}
int main(){
  engine eng(engine::kind::cpu,0); stream s(eng);
  struct S{int n,c,h,m,k,st,p;};
  std::vector<S> shapes={{32,3,32,16,3,1,1},{32,16,32,16,3,1,1},{32,16,32,32,3,2,1},{32,32,16,32,3,1,1},{32,16,32,32,1,2,0},{32,64,8,64,3,1,1},{32,32,16,64,3,2,1}};
  for(auto sh:shapes){
    int oh=(sh.h+2*sh.p-sh.k)/sh.st+1;
    memory::dims src={sh.n,sh.c,sh.h,sh.h}, wei={sh.m,sh.c,sh.k,sh.k}, dst={sh.n,sh.m,oh,oh}, str={sh.st,sh.st}, pad={sh.p,sh.p};
    double flops=2.0*sh.n*sh.m*oh*oh*sh.c*sh.k*sh.k;
    for(int any=0;any<2;++any){
      auto fs=any?tag::any:tag::nchw, fw=any?tag::any:tag::oihw;
      auto smd=memory::desc(src,dt::f32,fs), wmd=memory::desc(wei,dt::f32,fw), dmd=memory::desc(dst,dt::f32,fs);
      auto fpd=convolution_forward::primitive_desc(convolution_forward::desc(prop_kind::forward_training,algorithm::convolution_direct,smd,wmd,dmd,str,pad,pad),eng);
      auto bdpd=convolution_backward_data::primitive_desc(convolution_backward_data::desc(algorithm::convolution_direct,smd,wmd,dmd,str,pad,pad),eng,fpd);
      auto bwpd=convolution_backward_weights::primitive_desc(convolution_backward_weights::desc(algorithm::convolution_direct,smd,wmd,dmd,str,pad,pad),eng,fpd);
      memory S1(fpd.src_desc(),eng),W(fpd.weights_desc(),eng),D(fpd.dst_desc(),eng),DS(bdpd.diff_src_desc(),eng),DW(bwpd.diff_weights_desc(),eng),DD(bwpd.diff_dst_desc(),eng),DD2(bdpd.diff_dst_desc(),eng);
      auto f=convolution_forward(fpd); auto bd=convolution_backward_data(bdpd); auto bw=convolution_backward_weights(bwpd);
      memory uS({src,dt::f32,tag::nchw},eng),uD({dst,dt::f32,tag::nchw},eng),uW({wei,dt::f32,tag::oihw},eng),uDS({src,dt::f32,tag::nchw},eng),uDW({wei,dt::f32,tag::oihw},eng),uDD({dst,dt::f32,tag::nchw},eng);
      auto ro=[&](memory& a, memory& b){ if(a.get_desc()!=b.get_desc()) reorder(a,b).execute(s,a,b); };
      double t[3]={1e9,1e9,1e9};
      for(int r=0;r<20;++r){
        double a=now(); ro(uS,S1); ro(uW,W); f.execute(s,{{DNNL_ARG_SRC,S1},{DNNL_ARG_WEIGHTS,W},{DNNL_ARG_DST,D}}); ro(D,uD); s.wait(); double b=now();
        ro(uDD,DD2); bd.execute(s,{{DNNL_ARG_DIFF_DST,DD2},{DNNL_ARG_WEIGHTS,W},{DNNL_ARG_DIFF_SRC,DS}}); ro(DS,uDS); s.wait(); double c=now();
        ro(uS,S1); ro(uDD,DD); bw.execute(s,{{DNNL_ARG_SRC,S1},{DNNL_ARG_DIFF_DST,DD},{DNNL_ARG_DIFF_WEIGHTS,DW}}); ro(DW,uDW); s.wait(); double d=now();
        t[0]=std::min(t[0],b-a);t[1]=std::min(t[1],c-b);t[2]=std::min(t[2],d-c);
      }
      printf("%d->%d %dx%d k%d s%d %s: fwd %.0f bwd_data %.0f bwd_w %.0f GFLOP/s  impl %s | %s | %s\n",sh.c,sh.m,sh.h,sh.h,sh.k,sh.st,any?"any ":"nchw",flops/t[0]/1e9,flops/t[1]/1e9,flops/t[2]/1e9,fpd.impl_info_str(),bdpd.impl_info_str(),bwpd.impl_info_str());
    }
  }
}
