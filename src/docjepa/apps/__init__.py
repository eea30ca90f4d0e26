"""Applications on top of the library: the demo, the ``predict`` command and the HTML report."""
