"""The contract between the notebook, the hidden suite and the engine, stated once for the tests
(design.md: the grade cells and their points). Tests compare each side with this table."""

# The autograded grade cells of attention.ipynb and their points (total 100).
GRADE_POINTS = {
    "check_scaled_attention": 20,
    "check_masking": 10,
    "check_empty_row": 10,
    "check_masks": 15,
    "check_future": 10,
    "check_heads": 10,
    "check_multi_head": 15,
    "check_shape_trace": 5,
    "check_self_test": 5,
}
