// Small CUDA kernels whose nvcc-generated PTX (nvcc_kernels.ptx) the emulator
// tests run.  Regenerate with
//     nvcc -ptx -arch=sm_90 -O3 -lineinfo nvcc_kernels.cu -o nvcc_kernels.ptx
// (then replace the directory in `.file 1` by the bare file name).
#include <cuda_fp16.h>

// C = alpha * A @ B + beta * C, 64x64 tiles of C per block of 256 threads,
// each thread 4x4 outputs, K in steps of 16 through shared memory.
// M and N must be multiples of 64, K a multiple of 16.
extern "C" __global__ void sgemm(const float* __restrict__ A, const float* __restrict__ B, float* C,
                                 int M, int N, int K, float alpha, float beta) {
    const int BM = 64, BN = 64, BK = 16, TM = 4, TN = 4;
    __shared__ float As[BK][BM];
    __shared__ float Bs[BK][BN];
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = threadIdx.x; i < BM * BK; i += 256) {
            int r = i / BK, c = i % BK;
            As[c][r] = A[(row0 + r) * K + k0 + c];
            int rb = i / BN, cb = i % BN;
            Bs[rb][cb] = B[(k0 + rb) * N + col0 + cb];
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
            #pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[k][ty * TM + i];
            #pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k][tx * TN + j];
            #pragma unroll
            for (int i = 0; i < TM; ++i)
                #pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j) {
            int r = row0 + ty * TM + i, c = col0 + tx * TN + j;
            C[r * N + c] = alpha * acc[i][j] + beta * C[r * N + c];
        }
}

// *out += sum(x): grid-stride partial sums, warp shuffles, one atomic per block.
extern "C" __global__ void reduce(const float* x, float* out, int n) {
    float s = 0.f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) s += x[i];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
    __shared__ float w[32];
    if ((threadIdx.x & 31) == 0) w[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < blockDim.x / 32 ? w[threadIdx.x] : 0.f;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffff, s, o);
        if (threadIdx.x == 0) atomicAdd(out, s);
    }
}

// h[x[i] mod nb] += 1 (mathematical modulo).
extern "C" __global__ void hist(const int* x, unsigned* h, int n, int nb) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { int b = x[i] % nb; if (b < 0) b += nb; atomicAdd(&h[b], 1u); }
}

// A mix of f64 arithmetic, 64-bit integer division and f16 conversion.
extern "C" __global__ void misc(const double* a, double* b, long long* c, const short* s, __half* h, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double v = a[i];
    b[i] = fma(v, v, 1.0) / (v + 2.0);
    c[i] = (long long)v / 3 + (c[i] % 7);
    h[i] = __float2half((float)s[i] * 0.5f);
}

// Math library functions (sinf uses a .global table for large arguments).
extern "C" __global__ void math_functions(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[5 * i] = expf(v) + logf(fabsf(v) + 1.f);
        y[5 * i + 1] = sinf(v) * cosf(v);
        y[5 * i + 2] = sqrtf(fabsf(v)) + rsqrtf(fabsf(v) + 1.f) + fminf(v, 0.5f);
        y[5 * i + 3] = tanhf(v) + powf(fabsf(v), 1.5f);
        y[5 * i + 4] = (float)__float2int_rn(v) + erff(v);
    }
}

// Integer intrinsics: popc, clz, brev, ffs, funnel shift, byte permute, mulhi.
extern "C" __global__ void bit_intrinsics(const unsigned* x, unsigned* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned v = x[i];
        y[4 * i] = __popc(v) + __clz(v) + __brev(v) + __ffs(v);
        y[4 * i + 1] = (v / 7) + (v % 13) + min(v, 77u);
        y[4 * i + 2] = __funnelshift_l(v, v * 3, v) ^ __byte_perm(v, v >> 3, 0x5140);
        y[4 * i + 3] = __umulhi(v, v + 12345);
    }
}

// cp.async through the pipeline primitives.
#include <cuda_pipeline.h>
extern "C" __global__ void pipeline_copy(const float4* x, float4* y) {
    __shared__ float4 s[128];
    __pipeline_memcpy_async(&s[threadIdx.x], &x[threadIdx.x], sizeof(float4));
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    y[threadIdx.x] = s[127 - threadIdx.x];
}

// Warp primitives: shuffle up, ballot, all, __syncwarp, reduce.
extern "C" __global__ void warp_primitives(const int* x, int* y) {
    __shared__ int s[64];
    int v = x[threadIdx.x];
    v += __shfl_up_sync(0xffffffff, v, 1);
    unsigned b = __ballot_sync(0xffffffff, v > 0);
    int a = __all_sync(0xffffffff, v > -100);
    s[threadIdx.x] = v;
    __syncwarp();
    int neighbour = s[threadIdx.x ^ 1];
    y[threadIdx.x] = v + __popc(b) + a + __reduce_add_sync(0xffffffff, v) + neighbour;
}
