"""The classic group coordinator: membership, rebalances and committed offsets."""
