"""The per-shape placement MILP, one module per concern; `build.build_model` assembles them."""
