"""Placement ideas that were measured and not shipped, kept with the benchmarks that measured
them so they stay reproducible without riding in the product's wheel: ``balance`` (pack or
spread, chosen by cluster size and utilisation; ``python -m bench.placement --balance``) and
``gap_squares`` (our scorer with a Sum-of-Squares term for shared GPUs;
``python -m bench.placement_gap_squares``). Both are pure and use ``policies.placement`` only.
"""
