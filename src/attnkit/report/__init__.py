"""Every output file of OUT: results.json (``results_json``), the pages (``pages``, ``templates/``),
the class files (``store``), and how the isolation layer is described.
"""
