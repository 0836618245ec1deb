"""Memory accounting: weights, KV, compute buffers and the mirrored ggml graphs (pure)."""
