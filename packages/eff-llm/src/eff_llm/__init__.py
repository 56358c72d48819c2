"""eff-llm: Adapters, decoding, federated fine-tuning and training methods on Hugging Face models (S'MoRE, DEFT, LoRASuite, FedSVD, YOCO, OmniDraft, SVDecode, HeavyWater/SimplexWater, LRC, Nemotron-Flash, GAIN-RL, prompt-tuning memorization)."""

__all__: list[str] = []
