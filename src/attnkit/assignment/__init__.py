"""The plug-in API an assignment folder imports: its folder and manifest (``folder``), the checks its
hidden tests use (``checks``), and the catalogue's mistakes (``mistakes``).
"""
