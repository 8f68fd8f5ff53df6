/*
 * bench_ggml.c -- `make bench-ggml GGML_DIR=...`: one-token matvec speed of
 * ds4's kernels against ggml's on the same weight bytes, same machine, same
 * process, alternating (ratios, medians).
 *
 * Owns: nothing outside this program.  Not built by `make all` and not in
 * the tests: it needs a ggml tree built beside (scratch folder, see the
 * docs/perf/ggml.md); ggml is only linked here, never in the engine.
 *
 *   bench_ggml FORMAT N_IN N_OUT [REPS] [THREADS]
 *     FORMAT q8_0 | q2_k | q4_k | iq2_xxs | mxfp4 | f16
 *
 * Each measurement streams a pool of ~768 MB of random valid matrices
 * (sane block scales), so the weights come from DRAM.  ggml: a graph of
 * ggml_mul_mat nodes on the CPU backend (THREADS threads, default 1),
 * weights in ggml's AMX buffer where ggml was built with it and takes the
 * type (Q8_0, Q4_K), else its CPU_REPACK buffer for the types it repacks on
 * this CPU (Q4_K with AVX2, Q2_K with AVX-512), else the plain CPU buffer
 * (BENCH_GGML_BUFT=CPU|CPU_REPACK|AMX forces one); ds4: the engine's
 * cpu_matmul_groups with the best kernel table, one token, a pool of
 * THREADS threads.  Run it with OMP_WAIT_POLICY=passive (the Makefile does):
 * ggml's OpenMP workers otherwise spin between its runs and take the cores
 * from ds4's pool at THREADS > 1.  Prints GB/s of each, the ratio, and the
 * largest difference between the two engines' outputs on the first matrix
 * (their activation quantizations differ for Q8_0, MXFP4 and float paths).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <sys/mman.h>
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "bench_ggml_ds4.h"

static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static uint64_t rs=88172645463325252ull; static inline uint64_t xr(void){rs^=rs<<13;rs^=rs>>7;rs^=rs<<17;return rs;}
/* Both engines' weights on 2 MB pages (THP), as ds4 maps a model: with
 * 4 KiB pages the TLB misses and the prefetchers' stops at page ends weigh
 * differently on the two layouts (ds4 reads 8 rows at once, ggml's repacked
 * types one interleaved stream), and the comparison would be of pages, not
 * kernels.  Only the 2 MB-aligned interior can be huge. */
static void huge(void*p,size_t n){
#ifdef MADV_HUGEPAGE
  uintptr_t a=((uintptr_t)p+(2u<<20)-1)&~(uintptr_t)((2u<<20)-1), e=((uintptr_t)p+n)&~(uintptr_t)((2u<<20)-1);
  if(e>a) madvise((void*)a,e-a,MADV_HUGEPAGE);
#else
  (void)p;(void)n;
#endif
}
static int cmpd(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return (x>y)-(x<y);}

int main(int argc,char**argv){
  if(argc<4||!strcmp(argv[1],"--help")){fprintf(stderr,"usage: bench_ggml q8_0|q2_k|q4_k|iq2_xxs|mxfp4|f16 N_IN N_OUT [REPS] [THREADS]\n");return argc<4?2:0;}
  const char*fmt=argv[1]; int n_in=atoi(argv[2]), n_out=atoi(argv[3]); int reps=argc>4?atoi(argv[4]):7, nth=argc>5?atoi(argv[5]):1;
  if(reps<1||reps>64||nth<1||n_in<256||n_out<1||n_in%256){fprintf(stderr,"bench_ggml: bad arguments\n");return 2;}
  enum ggml_type gt; size_t bb; int bk; /* block bytes, block elements */
  if(!strcmp(fmt,"q8_0")){gt=GGML_TYPE_Q8_0;bb=34;bk=32;}
  else if(!strcmp(fmt,"q2_k")){gt=GGML_TYPE_Q2_K;bb=84;bk=256;}
  else if(!strcmp(fmt,"q4_k")){gt=GGML_TYPE_Q4_K;bb=144;bk=256;}
  else if(!strcmp(fmt,"iq2_xxs")){gt=GGML_TYPE_IQ2_XXS;bb=66;bk=256;}
  else if(!strcmp(fmt,"mxfp4")){gt=GGML_TYPE_MXFP4;bb=17;bk=32;}
  else {gt=GGML_TYPE_F16;bb=2;bk=1;}
  size_t ws=(size_t)n_in/bk*bb, msz=ws*n_out; int M=(int)((768ull<<20)/msz); if(M<2)M=2;
  size_t wsz=(msz*M+(2u<<20)-1)&~(size_t)((2u<<20)-1); uint8_t*w=aligned_alloc(2u<<20,wsz); if(!w){fprintf(stderr,"out of memory\n");return 1;} huge(w,wsz);
  for(size_t i=0;i<msz*M;i+=8){uint64_t v=xr(); memcpy(w+i,&v,8);}
  for(size_t b=0;b<msz*M;b+=bb){ uint16_t h=0x1c00|(uint16_t)(xr()&0xff);
    if(gt==GGML_TYPE_Q8_0||gt==GGML_TYPE_IQ2_XXS) memcpy(w+b,&h,2);
    else if(gt==GGML_TYPE_Q2_K){memcpy(w+b+80,&h,2);memcpy(w+b+82,&h,2);}
    else if(gt==GGML_TYPE_Q4_K){memcpy(w+b,&h,2);memcpy(w+b+2,&h,2);}
    else if(gt==GGML_TYPE_MXFP4) w[b]=(uint8_t)(120+xr()%12);   /* E8M0 scale 2^-8 .. 2^3 */
    else {uint16_t f=(uint16_t)(xr()&0xbbff); memcpy(w+b,&f,2);} }
  float*x=malloc(n_in*4); for(int i=0;i<n_in;i++)x[i]=(float)((int)(xr()%2001)-1000)/1000.f;

  /* ggml */
  ggml_backend_t be=ggml_backend_cpu_init(); ggml_backend_cpu_set_n_threads(be,nth);
  ggml_backend_reg_t reg=ggml_backend_cpu_reg(); ggml_backend_dev_t dev=ggml_backend_reg_dev_get(reg,0);
  ggml_backend_dev_get_extra_bufts_t gx=(ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(reg,"ggml_backend_dev_get_extra_bufts");
  ggml_backend_buffer_type_t buft=ggml_backend_cpu_buffer_type(); const char*bname="CPU";
  struct ggml_init_params ip={ (size_t)(M+4)*ggml_tensor_overhead(), NULL, true };   /* the weights only */
  struct ggml_context*cw=ggml_init(ip);
  struct ggml_tensor**W=malloc(M*sizeof*W);
  for(int m=0;m<M;m++) W[m]=ggml_new_tensor_2d(cw,gt,n_in,n_out);
  /* ggml's buffer type for these weights: BENCH_GGML_BUFT=CPU|CPU_REPACK|AMX
   * forces one (where it takes the type), else the fastest that does:
   * AMX (ggml built on an AMX CPU; it pre-packs Q8_0 and Q4_K and runs one
   * token as AVX-512 VNNI over that layout), then CPU_REPACK, then CPU */
  const char*want=getenv("BENCH_GGML_BUFT");
  if(gx) for(int pass=0;pass<2;pass++) for(ggml_backend_buffer_type_t*p=gx(dev);p&&*p;p++){
    const char*nm=ggml_backend_buft_name(*p);
    /* ggml repacks Q4_K on AVX2 CPUs and Q2_K only on AVX-512 ones; a type it
     * does not repack here must stay in the plain buffer (its set_tensor
     * crashes on one) */
    int ok=(!strcmp(nm,"CPU_REPACK") &&
            ((gt==GGML_TYPE_Q2_K&&ggml_cpu_has_avx512())||(gt==GGML_TYPE_Q4_K&&ggml_cpu_has_avx2()))) ||
           (!strcmp(nm,"AMX") && (gt==GGML_TYPE_Q8_0||gt==GGML_TYPE_Q4_K));
    if(!ok || strcmp(bname,"CPU")) continue;
    if(want ? !strcmp(nm,want) : (pass==0 ? !strcmp(nm,"AMX") : 1)){ buft=*p; bname=!strcmp(nm,"AMX")?"AMX":"CPU_REPACK"; } }
  ggml_backend_buffer_t wb=ggml_backend_alloc_ctx_tensors_from_buft(cw,buft);
  if(!wb){fprintf(stderr,"alloc failed\n");return 1;}
  huge(ggml_backend_buffer_get_base(wb),ggml_backend_buffer_get_size(wb));
  for(int m=0;m<M;m++) ggml_backend_tensor_set(W[m],w+(size_t)m*msz,0,msz);
  struct ggml_init_params ip2={ (size_t)(2*M+64)*ggml_tensor_overhead()+ggml_graph_overhead_custom(4*M+64,false), NULL, true };
  struct ggml_context*cg=ggml_init(ip2);
  struct ggml_tensor*X2=ggml_new_tensor_2d(cg,GGML_TYPE_F32,n_in,1); ggml_set_input(X2);
  struct ggml_cgraph*gf=ggml_new_graph_custom(cg,4*M+64,false);
  for(int m=0;m<M;m++){ struct ggml_tensor*y=ggml_mul_mat(cg,W[m],X2); ggml_set_output(y); ggml_build_forward_expand(gf,y); }
  ggml_gallocr_t ga=ggml_gallocr_new(ggml_backend_get_default_buffer_type(be));
  if(!ggml_gallocr_alloc_graph(ga,gf)){fprintf(stderr,"gallocr failed\n");return 1;}
  ggml_backend_tensor_set(X2,x,0,n_in*4);

  /* ds4: the engine's own entry point (bench_ggml_ds4.c) */
  ds4_side*ds=ds4_side_new((uint32_t)gt,n_in,n_out,ws,x,nth); if(!ds){fprintf(stderr,"ds4 side: setup failed\n");return 1;}
  ds4_side_scan(ds,w,(size_t)M*msz);
  float*y=malloc((size_t)n_out*4);

  double tg[64],td[64]; float chk=0;
  ggml_backend_graph_compute(be,gf); for(int m=0;m<M;m++) ds4_side_run(ds,w+(size_t)m*msz,y);
  for(int r=0;r<reps;r++){
    double t0=now(); ggml_backend_graph_compute(be,gf); tg[r]=now()-t0;
    t0=now(); for(int m=0;m<M;m++){ds4_side_run(ds,w+(size_t)m*msz,y);chk+=y[0];} td[r]=now()-t0;
  }
  /* same results? compare matrix 0 */
  struct ggml_tensor*y0=ggml_graph_node(gf,0); float*yg=malloc((size_t)n_out*4); ggml_backend_tensor_get(y0,yg,0,(size_t)n_out*4);
  ds4_side_run(ds,w,y); double md=0,mx=0; for(int i=0;i<n_out;i++){double d=y[i]-yg[i]; if(d<0)d=-d; if(d>md)md=d; double ab=yg[i]<0?-yg[i]:yg[i]; if(ab>mx)mx=ab;}
  qsort(tg,reps,sizeof(double),cmpd); qsort(td,reps,sizeof(double),cmpd);
  double gbs_g=(double)M*msz/tg[reps/2]/1e9, gbs_d=(double)M*msz/td[reps/2]/1e9;
  printf("%-8s %5d x %5d  ggml(%s, %d thr) %6.2f GB/s  ds4 %6.2f GB/s  ds4/ggml %.2f  (max |diff| %.3g of max |y| %.3g) chk %g\n",
         fmt,n_out,n_in,bname,nth,gbs_g,gbs_d,gbs_d/gbs_g,md,mx,chk);
  return 0;
}
