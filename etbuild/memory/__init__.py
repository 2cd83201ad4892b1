"""Memory planning: tensor lifetimes, placement algorithms, the plan as data."""
