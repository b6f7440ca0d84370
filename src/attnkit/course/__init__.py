"""What a course's own tools read and write: nbgrader's gradebook and commands, Gradescope's bundle,
the student release, and the LMS feedback upload.
"""
