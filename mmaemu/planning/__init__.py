"""Planning: every decision of a call, from sizes, dtypes and cached facts only."""
