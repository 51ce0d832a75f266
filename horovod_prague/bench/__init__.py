"""``prague-bench``: measures All-Reduce and Prague's designs side by side (see ``cli``)."""
