"""What arrives: a submissions folder turned into jobs (``jobs``), and an LMS download collected into
nbgrader's layout (``lms_collect``, ``lms_download``, ``lms_names``).
"""
