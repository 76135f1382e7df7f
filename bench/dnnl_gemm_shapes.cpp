// gpt_small's and tiny_lm's matrix-product shapes (row-major, batch 8 x context 128 and batch 64 x
// context 32; attention's per-head products as batches) through OpenBLAS's and oneDNN's sgemm, one
// thread: GFLOP/s of each. Informational (bench/results/2026-12-05-gemm-engines.md); not part of
// the build:
//   g++ -O2 bench/dnnl_gemm_shapes.cpp -I/usr/include/x86_64-linux-gnu/openblas-pthread -lopenblas -ldnnl \
//     -o /tmp/dnnl_gemm_shapes && OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /tmp/dnnl_gemm_shapes
#include <oneapi/dnnl/dnnl.h>
#include <cblas.h>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
static double now(){return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();}
int main(){
  struct S{char ta,tb; int m,n,k; int batch;};
  // row-major C[m,n] = op(A)[m,k] op(B)[k,n]
  std::vector<S> shapes={{'N','T',1024,768,256,1},{'N','T',1024,256,256,1},{'N','T',1024,1024,256,1},{'N','T',1024,256,1024,1},{'N','T',1024,512,256,1},
    {'N','N',1024,256,768,1},{'T','N',256,768,1024,1},{'T','N',1024,256,1024,1},{'N','N',1024,256,1024,1},
    {'N','T',128,128,32,64},{'N','N',128,32,128,64},{'T','N',128,32,128,64},{'N','T',128,128,32,64},
    {'N','N',512,512,512,1},
    {'N','T',32,32,16,256},{'N','N',32,16,32,256},{'N','T',64,64,16,64},{'N','T',2048,64,64,1},{'N','T',2048,256,64,1},{'T','N',64,256,2048,1},{'N','T',128,128,32,16},{'N','T',256,64,64,4},{'N','T',64,64,64,16},{'N','T',96,96,32,16},{'N','N',2048,64,256,1},{'T','N',64,64,2048,1}};
  for(auto s:shapes){
    std::vector<float> A((size_t)s.m*s.k*s.batch,0.5f),B((size_t)s.k*s.n*s.batch,0.25f),C((size_t)s.m*s.n*s.batch);
    int lda = s.ta=='N'? s.k : s.m, ldb = s.tb=='N'? s.n : s.k;
    double t1=1e9,t2=1e9;
    for(int r=0;r<10;++r){
      double a=now();
      for(int b=0;b<s.batch;++b) cblas_sgemm(CblasRowMajor, s.ta=='N'?CblasNoTrans:CblasTrans, s.tb=='N'?CblasNoTrans:CblasTrans, s.m,s.n,s.k,1.f,A.data()+(size_t)b*s.m*s.k,lda,B.data()+(size_t)b*s.k*s.n,ldb,0.f,C.data()+(size_t)b*s.m*s.n,s.n);
      double m=now();
      for(int b=0;b<s.batch;++b) dnnl_sgemm(s.ta,s.tb,s.m,s.n,s.k,1.f,A.data()+(size_t)b*s.m*s.k,lda,B.data()+(size_t)b*s.k*s.n,ldb,0.f,C.data()+(size_t)b*s.m*s.n,s.n);
      double e=now(); t1=std::min(t1,m-a); t2=std::min(t2,e-m);
    }
    double fl=2.0*s.m*s.n*s.k*s.batch;
    printf("%c%c m%d n%d k%d x%d: openblas %.0f dnnl %.0f GFLOP/s\n",s.ta,s.tb,s.m,s.n,s.k,s.batch,fl/t1/1e9,fl/t2/1e9);
  }
}

