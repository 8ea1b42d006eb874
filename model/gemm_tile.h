// The body of the kernels of model/gemm_kernels.h, written once over a
// vector type and included by each instruction set's file, which supplies
// the vector type (`V`: T, kWidth, zero, load, load_first, store,
// store_first, broadcast, fma, and for the epilogues splat, add, sub, mul,
// div, min, max, nearest, pow2, exp_limits, all_equal). Included only there,
// inside an unnamed namespace: each file's copy is its own.
//
// A C tile of kRows rows and kVectors vectors is held in registers while p
// runs over a block of k: per p, kVectors loads of B's row and kRows
// broadcasts of A's column, kRows * kVectors independent FMAs. The chain
// per entry is the contract: no splitting of k into partial sums. A long k
// is walked in blocks (KBlock) with the tile stored to C between them and
// loaded back, which is exact: each entry is still the one chain.

// A compile-time switch and number passed as values (std::bool_constant,
// std::integral_constant without <type_traits>: this file includes
// nothing).
template <bool kValue>
struct Flag {
  static constexpr bool value = kValue;
};
template <int kValue>
struct Value {
  static constexpr int value = kValue;
};

// exp(x), lane by lane: gemm::ExpConstants' sequence of operations.
template <class V>
typename V::Reg exp_of(typename V::Reg x) {
  using T = typename V::T;
  using C = gemm::ExpConstants<T>;
  using Reg = typename V::Reg;
  // Bounded first so that n fits the exponent; exp_limits puts the lanes
  // outside the bounds right.
  const Reg bounded = V::min(V::max(x, V::splat(C::kLo)), V::splat(C::kHi));
  const Reg n = V::nearest(V::mul(bounded, V::splat(C::kLog2e)));
  Reg r = V::fma(n, V::splat(-C::kLn2Hi), bounded);
  r = V::fma(n, V::splat(-C::kLn2Lo), r);
  Reg p = V::splat(gemm::exp_coefficient<T>(C::kDegree));
  for (int k = C::kDegree - 1; k >= 0; --k)
    p = V::fma(p, r, V::splat(gemm::exp_coefficient<T>(k)));
  const Reg e = V::mul(p, V::pow2(n));
  // Where every lane is inside the bounds (bounded equal to x: none
  // beyond them, none NaN), exp_limits would return e as it is: one
  // comparison instead of its three and three blends.
  return V::all_equal(x, bounded) ? e : V::exp_limits(x, e);
}

// Entry block `at` of C (its offset from g.c; `width` lanes wide on an
// edge) gets h through the epilogue (gemm_kernels.h). Inlined always: a
// call per vector of the tile cost about 2 % of a float32 mod47 step
// beside SiLU's 16-lane exp and divide.
template <class V, int kEpilogue>
[[gnu::always_inline]] inline void finish(
    const gemm::Operands<typename V::T>& g, int64_t at, typename V::Reg h,
    bool edge, int width) {
  using T = typename V::T;
  using Reg = typename V::Reg;
  auto put = [&](T* p, Reg x) {
    if (edge)
      V::store_first(p, x, width);
    else
      V::store(p, x);
  };
  auto get = [&](const T* p) {
    return edge ? V::load_first(p, width) : V::load(p);
  };
  const Reg one = V::splat(T(1));
  if constexpr (kEpilogue == gemm::kSilu) {
    const Reg s = V::div(one, V::add(one, exp_of<V>(V::sub(V::zero(), h))));
    put(g.sig + at, s);
    h = V::mul(h, s);
  } else if constexpr (kEpilogue == gemm::kSiluGrad) {
    const Reg s = get(g.sig + at);
    h = V::mul(h, V::fma(get(g.act + at), V::sub(one, s), s));
  } else if constexpr (kEpilogue == gemm::kAdd) {
    h = V::add(h, get(g.add + at));
  }
  put(g.c + at, h);
}

// The rows p0 .. p1 - 1 of a k walked in blocks: the first block's chains
// start from 0 (or from C with Operands::resume), a later one's from the
// tile C holds.
struct KBlock {
  int64_t p0, p1;
  bool first() const { return p0 == 0; }
};

// One tile: rows i0 .. i0 + kRows of C, columns j0 + the panel's kVectors
// vectors, over the k block `kb`. B is read from `b` (row stride `ldb`,
// the panel's first column, the block's first row); with kEdge the last
// vector of C holds `last_width` columns, and with kMaskB B's last vector
// is read only that wide too (an unpacked B: a packed one is padded with
// zeros).
template <class V, int kRows, int kVectors, bool kEdge, bool kMaskB,
          int kEpilogue>
void tile(const gemm::Operands<typename V::T>& g, const typename V::T* b,
          int64_t ldb, int64_t i0, int64_t j0, int last_width, KBlock kb) {
  using T = typename V::T;
  typename V::Reg acc[kRows][kVectors];
  const bool from_zero = kb.first() && !g.resume;
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < kVectors; ++v) {
      const T* c = g.c + (i0 + r) * g.ldc + j0 + v * V::kWidth;
      acc[r][v] = from_zero                    ? V::zero()
                  : kEdge && v == kVectors - 1 ? V::load_first(c, last_width)
                                               : V::load(c);
    }
  }
  // What the epilogue reads or writes beside the chains, asked for now, a
  // whole k loop before the stores need it: the SiLU's derivative reads
  // the forward's act and sig (megabytes written a whole pass earlier,
  // back in memory), the SiLU writes sig and C, the sum reads its addend.
  // A line a vector on AVX-512 (two vectors a line on AVX2). The float64
  // mod47 step 0.96x on a Xeon, float32 within the noise
  // (docs/performance.md, "The products, shape by shape").
  if constexpr (kEpilogue != gemm::kStore) {
    for (int r = 0; r < kRows; ++r) {
      for (int v = 0; v < kVectors; ++v) {
        const int64_t at = (i0 + r) * g.ldc + j0 + v * V::kWidth;
        if constexpr (kEpilogue == gemm::kSiluGrad) {
          __builtin_prefetch(g.act + at);
          __builtin_prefetch(g.sig + at);
        } else if constexpr (kEpilogue == gemm::kSilu) {
          __builtin_prefetch(g.sig + at, 1);
          __builtin_prefetch(g.c + at, 1);
        } else {
          __builtin_prefetch(g.add + at);
        }
      }
    }
  }
  const T* a = g.a + i0 * g.a_row + kb.p0 * g.a_col;
  for (int64_t p = kb.p0; p < kb.p1; ++p, a += g.a_col, b += ldb) {
    typename V::Reg row[kVectors];
    for (int v = 0; v < kVectors; ++v) {
      const bool edge = kMaskB && v == kVectors - 1;
      row[v] = edge ? V::load_first(b + v * V::kWidth, last_width)
                    : V::load(b + v * V::kWidth);
    }
    for (int r = 0; r < kRows; ++r) {
      const typename V::Reg x = V::broadcast(a + r * g.a_row);
      for (int v = 0; v < kVectors; ++v)
        acc[r][v] = V::fma(x, row[v], acc[r][v]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < kVectors; ++v) {
      finish<V, kEpilogue>(g, (i0 + r) * g.ldc + j0 + v * V::kWidth, acc[r][v],
                           kEdge && v == kVectors - 1, last_width);
    }
  }
}

// A row block of fewer than kRows rows: the same tile with `rows` rows.
template <class V, int kRows, int kVectors, bool kEdge, bool kMaskB,
          int kEpilogue>
void short_tile(const gemm::Operands<typename V::T>& g, const typename V::T* b,
                int64_t ldb, int64_t i0, int64_t j0, int rows, int last_width,
                KBlock kb) {
  if constexpr (kRows > 1) {
    if (rows == kRows - 1)
      return tile<V, kRows - 1, kVectors, kEdge, kMaskB, kEpilogue>(
          g, b, ldb, i0, j0, last_width, kb);
    return short_tile<V, kRows - 1, kVectors, kEdge, kMaskB, kEpilogue>(
        g, b, ldb, i0, j0, rows, last_width, kb);
  }
}

// Copies the rows kb.p0 .. kb.p1 of the panel's block of B
// (kVectors * kWidth columns) into g.pack, rows contiguous, columns past
// `width` zero: one stream the tiles read in order, where B's own rows
// (ldb apart, 1 KiB for 256 float32 columns) fall on a few L1 sets and
// evict each other.
template <class V, int kVectors>
void pack_panel(const gemm::Operands<typename V::T>& g, int64_t j0,
                int64_t width, KBlock kb) {
  constexpr int64_t kPanel = int64_t(kVectors) * V::kWidth;
  const typename V::T* b = g.b + kb.p0 * g.ldb + j0;
  typename V::T* out = g.pack;
  for (int64_t p = kb.p0; p < kb.p1; ++p, b += g.ldb, out += kPanel) {
    for (int v = 0; v < kVectors; ++v) {
      const int64_t left = width - int64_t(v) * V::kWidth;
      const int n = int(left >= V::kWidth ? V::kWidth : left > 0 ? left : 0);
      V::store(out + v * V::kWidth, n == V::kWidth
                                        ? V::load(b + v * V::kWidth)
                                        : V::load_first(b + v * V::kWidth, n));
    }
  }
}

// The rows of k walked in one block up to twice this many, else in blocks
// of it: a block's rows of B's panel (32 KiB in float32) and of A's
// columns stay in L1 while every row block reads them. Without blocks the
// weight gradients (k = the batch's 2,649 positions, A = dY read
// transposed) ran at 40-60 % of their contiguous rate inside the step.
inline constexpr int64_t kKBlock = 128;

// A column panel j0 .. j0 + kVectors * kWidth (its last vector
// `last_width` wide) over every row block, from B packed or in place, k in
// blocks; the epilogue with the last block.
template <class V, int kRows, int kVectors, bool kEdge, int kEpilogue>
void panel(const gemm::Operands<typename V::T>& g, int64_t j0, int last_width) {
  constexpr int64_t kPanel = int64_t(kVectors) * V::kWidth;
  // Packed when more than one row block reads the panel and B's rows are
  // not already the panel's (ldb == its width).
  const bool packed = g.pack != nullptr && g.m > kRows && g.ldb != kPanel;
  const int64_t block = g.k > 2 * kKBlock ? kKBlock : g.k;
  auto each_block = [&](auto mask_b, auto epilogue, KBlock kb) {
    constexpr bool kMaskB = decltype(mask_b)::value;
    constexpr int kThen = decltype(epilogue)::value;
    const typename V::T* b = packed ? g.pack : g.b + kb.p0 * g.ldb + j0;
    const int64_t ldb = packed ? kPanel : g.ldb;
    int64_t i0 = 0;
    for (; i0 + kRows <= g.m; i0 += kRows)
      tile<V, kRows, kVectors, kEdge, kMaskB, kThen>(g, b, ldb, i0, j0,
                                                     last_width, kb);
    if (i0 < g.m)
      short_tile<V, kRows, kVectors, kEdge, kMaskB, kThen>(
          g, b, ldb, i0, j0, int(g.m - i0), last_width, kb);
  };
  auto then = [&](auto mask_b, KBlock kb) {
    if (kb.p1 == g.k)
      each_block(mask_b, Value<kEpilogue>{}, kb);
    else
      each_block(mask_b, Value<gemm::kStore>{}, kb);
  };
  KBlock kb{0, 0};
  do {  // once for k = 0 too: C = 0 through the epilogue
    kb.p1 = kb.p0 + block < g.k ? kb.p0 + block : g.k;
    if (packed)
      pack_panel<V, kVectors>(g, j0, kPanel - V::kWidth + last_width, kb);
    if (kEdge && !packed)
      then(Flag<true>{}, kb);
    else
      then(Flag<false>{}, kb);
    kb.p0 = kb.p1;
  } while (kb.p0 < g.k);
}

// The columns left after the full panels: 1 .. kVectors vectors, the last
// one partial or full.
template <class V, int kRows, int kVectors, int kEpilogue>
void edge_panel(const gemm::Operands<typename V::T>& g, int64_t j0, int vectors,
                int last_width) {
  if constexpr (kVectors > 0) {
    if (vectors == kVectors) {
      if (last_width == V::kWidth)
        return panel<V, kRows, kVectors, false, kEpilogue>(g, j0, last_width);
      return panel<V, kRows, kVectors, true, kEpilogue>(g, j0, last_width);
    }
    return edge_panel<V, kRows, kVectors - 1, kEpilogue>(g, j0, vectors,
                                                         last_width);
  }
}

template <class V, int kRows, int kVectors, int kEpilogue>
void multiply_then(const gemm::Operands<typename V::T>& g) {
  constexpr int64_t kPanel = int64_t(kVectors) * V::kWidth;
  static_assert(kPanel <= gemm::kPackWidth, "the pack holds one panel");
  int64_t j0 = 0;
  for (; j0 + kPanel <= g.n; j0 += kPanel)
    panel<V, kRows, kVectors, false, kEpilogue>(g, j0, V::kWidth);
  if (j0 < g.n) {
    const int64_t left = g.n - j0;
    const int vectors = int((left + V::kWidth - 1) / V::kWidth);
    const int last_width = int(left - int64_t(vectors - 1) * V::kWidth);
    edge_panel<V, kRows, kVectors, kEpilogue>(g, j0, vectors, last_width);
  }
}

template <class V, int kRows, int kVectors>
void multiply(const gemm::Operands<typename V::T>& g) {
  if (g.m <= 0 || g.n <= 0)
    return;
  switch (g.epilogue) {
    case gemm::kSilu:
      return multiply_then<V, kRows, kVectors, gemm::kSilu>(g);
    case gemm::kSiluGrad:
      return multiply_then<V, kRows, kVectors, gemm::kSiluGrad>(g);
    case gemm::kAdd:
      return multiply_then<V, kRows, kVectors, gemm::kAdd>(g);
    default:
      return multiply_then<V, kRows, kVectors, gemm::kStore>(g);
  }
}

// The FMA peak probe: the tile's kRows * kVectors chains of FMAs, each
// with its own pair of multiplicands as in the tile, on registers alone,
// `rounds` times: what one core's FMA units do at most. (One shared pair
// of multiplicands ran at half the rate on a Xeon with AVX-512, below what
// the tile itself reaches.) Returns a lane of the sum, so that the work is
// kept.
template <class V, int kRows, int kVectors>
typename V::T fma_loop(int64_t rounds) {
  using T = typename V::T;
  typename V::Reg acc[kRows][kVectors], x[kRows], y[kVectors];
  for (int r = 0; r < kRows; ++r) {
    const T value = T(1) - T(0.01) * T(r);
    x[r] = V::broadcast(&value);
  }
  for (int v = 0; v < kVectors; ++v) {
    const T value = T(1e-7) * T(v + 1);
    y[v] = V::broadcast(&value);
  }
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kVectors; ++v)
      acc[r][v] = V::zero();
  for (int64_t i = 0; i < rounds; ++i) {
    for (int r = 0; r < kRows; ++r)
      for (int v = 0; v < kVectors; ++v)
        acc[r][v] = V::fma(x[r], y[v], acc[r][v]);
  }
  T out[V::kWidth];
  typename V::Reg sum = V::zero();
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kVectors; ++v)
      sum = V::fma(x[0], acc[r][v], sum);
  V::store(out, sum);
  return out[0];
}
