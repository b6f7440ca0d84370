"""The grade pipeline: a class from its submissions folder to OUT and nbgrader's gradebook, as
``attnkit grade`` runs it (``grade``), one notebook alone (``check``, for ``attnkit check``), a
graded class into the gradebook and the LMS (``class_record``, also for ``merge``), and what the
terminal shows of them (``console``). Above the engine (it fans the jobs out) and everything under
it; the command line parses the arguments and calls in here.
"""
