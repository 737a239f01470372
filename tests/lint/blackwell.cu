// blackwell.cu - sm_100a: packed f32x2 arithmetic, 256-bit loads, tcgen05 fences, family-specific conversions.
#include <stdint.h>

__global__ void f32x2(const float2 *a, const float2 *b, float2 *c, const float4 *wide, float *out) {
    int i = threadIdx.x;
    unsigned long long x, y, z;
    x = *(const unsigned long long *)&a[i];
    y = *(const unsigned long long *)&b[i];
    asm("add.rn.f32x2 %0, %1, %2;" : "=l"(z) : "l"(x), "l"(y));
    *(unsigned long long *)&c[i] = z;
    float v[8];
    asm volatile("ld.global.v8.f32 {%0,%1,%2,%3,%4,%5,%6,%7}, [%8];"
                 : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3]), "=f"(v[4]), "=f"(v[5]), "=f"(v[6]), "=f"(v[7])
                 : "l"(wide + 2 * i));
    asm volatile("tcgen05.fence::before_thread_sync;");
    unsigned short e;
    asm("cvt.rn.satfinite.e2m3x2.f32 %0, %1, %2;" : "=h"(e) : "f"(v[0]), "f"(v[1]));
    out[i] = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7] + (float)e;
}
