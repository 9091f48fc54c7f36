"""The model: transformer (the DiffusionGemma-layout network and its weight names), moe (experts), ops,
kv_cache and prefix_cache (the context's keys and values, reused across fills)."""
