"""The chapter-19 assignment as the tests see it: its manifest, and its grade cells' points read
from the source notebook (the one place they are stated; the engine reads them the same way)."""

from attnkit.assignment import discover

CH19 = discover()["ch19-attention"]

# The autograded grade cells of attention.ipynb and their points (the design's total: 100).
GRADE_POINTS = {grade_id: part.points for grade_id, part in CH19.parts.items()}
