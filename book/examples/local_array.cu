// Where spills come from: an array indexed at run time cannot live in registers.
// Both kernels fill a[32] with values computed in registers (a recurrence, so the compiler cannot
// reload them from x instead) and then read four elements chosen at run time by idx.

extern "C" __global__ void runtime_index(const float* x, const int* idx, float* y) {
    float a[32];
    float v = x[threadIdx.x];
#pragma unroll
    for (int j = 0; j < 32; ++j) { v = v * 1.0001f + 1.f; a[j] = v; }
    float s = 0.f;
    for (int t = 0; t < 4; ++t) s += a[idx[t * blockDim.x + threadIdx.x] & 31];   // run-time index
    y[threadIdx.x] = s;
}

extern "C" __global__ void constant_index(const float* x, const int* idx, float* y) {
    float a[32];
    float v = x[threadIdx.x];
#pragma unroll
    for (int j = 0; j < 32; ++j) { v = v * 1.0001f + 1.f; a[j] = v; }
    float s = 0.f;
    for (int t = 0; t < 4; ++t) {
        const int i = idx[t * blockDim.x + threadIdx.x] & 31;
#pragma unroll
        for (int j = 0; j < 32; ++j) s += (j == i) ? a[j] : 0.f;                 // every index a constant
    }
    y[threadIdx.x] = s;
}
