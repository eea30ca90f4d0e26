"""The engine without people, for measuring it: a scripted annotator (:mod:`.annotator`) stands in for people on
generated pages whose answers are known, :mod:`.run` plays rounds of annotation and retraining
(``docjepa engine simulate``), and :mod:`.curve` turns the result into the engine curve's table and plot
(``docjepa engine curve``). Nothing here is part of the served application."""
