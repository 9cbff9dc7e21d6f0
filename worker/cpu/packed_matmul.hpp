// Products with weight matrices repacked for inference: each group of four rows of a row-major
// (rows, cols) matrix is stored as 8-column chunks of the four rows in turn ([r0 c0..7][r1 c0..7]
// [r2 c0..7][r3 c0..7][r0 c8..15]...; the last cols % 8 columns of the four rows follow, row by
// row; the last rows % 4 rows stay row-major at the end). Same size, so it is done in place.
//
// Why: one position's product reads every weight once, so it runs at the speed memory delivers
// them, and nothing else matters as much. Interleaved, four rows share each load of x and the
// weights still arrive as one sequential stream; several positions (a prompt, a slide) reuse each
// group of rows from cache for all of them, so one kernel serves both. Measured on this machine's
// shared core (docs/PERF.md, "Generation"): 27-33 GB/s for one position, as fast as row by row
// and above OpenBLAS's sgemv (20-25); a plain read of the same bytes runs at 34-45.
#pragma once

#include <vector>

namespace xtrain {

// Rows per packed group: a split of a product's rows (packed_matmul_accumulate_rows) starts each
// part at a multiple of this.
constexpr int kPackedRowGroup = 4;

// Repacks W (rows, cols) in place; `scratch` is grown to rows*cols floats and may be reused.
void pack_rows(float* W, int rows, int cols, std::vector<float>& scratch);

// out (n, rows) += x (n, cols) @ W^T for a packed W. Each output's sum runs over the columns in
// an order fixed by cols alone: the same bits for a position whatever n is.
void packed_matmul_accumulate(float* out, const float* W, const float* x, int n, int rows, int cols);

// The part of that product for the output rows [first, last): `first` a multiple of
// kPackedRowGroup, `last` one too or `rows`. Parts that cover [0, rows) add exactly what the whole
// product adds (each output's sum is the same), so threads may split a product by rows
// (ThreadTeam::split with kPackedRowGroup as the alignment).
void packed_matmul_accumulate_rows(float* out, const float* W, const float* x, int n, int rows, int cols, int first,
                                   int last);

// Row `r` of a packed W, as it was before packing, into dst (cols floats).
void packed_row(float* dst, const float* W, int r, int rows, int cols);

}  // namespace xtrain
