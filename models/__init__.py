"""Networks and losses: continual optical flow, the PARTIME benchmark networks. Knows nothing of HTTP."""
