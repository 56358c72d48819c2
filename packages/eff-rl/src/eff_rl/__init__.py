"""eff-rl: Continual reinforcement learning on gymnasium: CKA-RL (continual knowledge adaptation with a pool of knowledge vectors)."""

__all__: list[str] = []
