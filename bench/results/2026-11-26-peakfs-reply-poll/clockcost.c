#include <stdio.h>
#include <time.h>
#include <x86intrin.h>
static double ns(struct timespec a, struct timespec b){return (b.tv_sec-a.tv_sec)*1e9+(b.tv_nsec-a.tv_nsec);}
int main(){
  const int N=2000000; struct timespec t0,t1,x; volatile long sink=0;
  clockid_t ids[]={CLOCK_MONOTONIC,CLOCK_MONOTONIC_COARSE,CLOCK_REALTIME};
  const char*names[]={"MONOTONIC","MONOTONIC_COARSE","REALTIME"};
  for(int k=0;k<3;k++){clock_gettime(CLOCK_MONOTONIC,&t0);for(int i=0;i<N;i++){clock_gettime(ids[k],&x);sink+=x.tv_nsec;}clock_gettime(CLOCK_MONOTONIC,&t1);printf("clock_gettime(%s): %.1f ns\n",names[k],ns(t0,t1)/N);}
  clock_gettime(CLOCK_MONOTONIC,&t0);for(int i=0;i<N;i++){sink+=__rdtsc();}clock_gettime(CLOCK_MONOTONIC,&t1);printf("rdtsc: %.1f ns\n",ns(t0,t1)/N);
  return 0;}
