/* Session 2026-12-06: one oneDNN 2.6 (Debian libdnnl2) bf16 matmul, weights prepacked in the primitive's
 *  format, A bf16, C f32; R rotating weight copies (R=200 makes them cold). gcc -O2 this.c -ldnnl
 *  OMP_NUM_THREADS=1 ./a.out M K N [R]. Not part of the build (bench/RESULTS.md, 2026-12-06). */
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define CK(x) do{dnnl_status_t s=(x); if(s){printf("err %d at %s\n",s,#x);exit(1);}}while(0)
int main(int argc,char**argv){
  int M=atoi(argv[1]),K=atoi(argv[2]),N=atoi(argv[3]); int R=argc>4?atoi(argv[4]):1;
  dnnl_engine_t eng; CK(dnnl_engine_create(&eng,dnnl_cpu,0)); dnnl_stream_t st; CK(dnnl_stream_create(&st,eng,dnnl_stream_default_flags));
  dnnl_memory_desc_t a,b,c,bany; dnnl_dims_t da={M,K},db={K,N},dc={M,N};
  CK(dnnl_memory_desc_init_by_tag(&a,2,da,dnnl_bf16,dnnl_ab));
  CK(dnnl_memory_desc_init_by_tag(&b,2,db,dnnl_bf16,dnnl_ab));
  CK(dnnl_memory_desc_init_by_tag(&bany,2,db,dnnl_bf16,dnnl_format_tag_any));
  CK(dnnl_memory_desc_init_by_tag(&c,2,dc,dnnl_f32,dnnl_ab));
  dnnl_matmul_desc_t md; CK(dnnl_matmul_desc_init(&md,&a,&bany,NULL,&c));
  dnnl_primitive_desc_t pd; CK(dnnl_primitive_desc_create(&pd,&md,NULL,eng,NULL));
  const dnnl_memory_desc_t*wmd=dnnl_primitive_desc_query_md(pd,dnnl_query_weights_md,0);
  const char*impl; dnnl_primitive_desc_query(pd,dnnl_query_impl_info_str,0,&impl);
  dnnl_memory_t ma,mb,mbp,mc; CK(dnnl_memory_create(&ma,&a,eng,DNNL_MEMORY_ALLOCATE)); CK(dnnl_memory_create(&mb,&b,eng,DNNL_MEMORY_ALLOCATE));
  dnnl_memory_t mbps[256]; for(int q=0;q<R;q++) CK(dnnl_memory_create(&mbps[q],wmd,eng,DNNL_MEMORY_ALLOCATE)); mbp=mbps[0]; CK(dnnl_memory_create(&mc,&c,eng,DNNL_MEMORY_ALLOCATE));
  void*p; dnnl_memory_get_data_handle(ma,&p); unsigned short*pa=p; for(long i=0;i<(long)M*K;i++)pa[i]=0x3f80+(i%7);
  dnnl_memory_get_data_handle(mb,&p); unsigned short*pb=p; for(long i=0;i<(long)K*N;i++)pb[i]=0x3c00+(i%5);
  dnnl_primitive_desc_t rpd; CK(dnnl_reorder_primitive_desc_create(&rpd,&b,eng,wmd,eng,NULL)); dnnl_primitive_t r; CK(dnnl_primitive_create(&r,rpd));
  dnnl_exec_arg_t ra[2]={{DNNL_ARG_FROM,mb},{DNNL_ARG_TO,mbp}}; for(int q=0;q<R;q++){ra[1].memory=mbps[q]; CK(dnnl_primitive_execute(r,st,2,ra));} dnnl_stream_wait(st);
  dnnl_primitive_t mm; CK(dnnl_primitive_create(&mm,pd));
  dnnl_exec_arg_t args[3]={{DNNL_ARG_SRC,ma},{DNNL_ARG_WEIGHTS,mbp},{DNNL_ARG_DST,mc}};
  for(int i=0;i<5;i++) dnnl_primitive_execute(mm,st,3,args);
  double best=1e9; for(int r=0;r<7;r++){double t=now(); int it=20; for(int i=0;i<it;i++){args[1].memory=mbps[i%R]; dnnl_primitive_execute(mm,st,3,args);} dnnl_stream_wait(st); double e=(now()-t)/it; if(e<best)best=e;}
  printf("R=%d %s M=%d K=%d N=%d %.3f ms %.2f TFLOP/s\n",R,impl,M,K,N,best*1e3,2.0*M*K*N/best/1e12);
}
