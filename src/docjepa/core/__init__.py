"""The foundations every layer of docjepa uses: typed configs (``config``) and the expected errors (``errors``)."""
