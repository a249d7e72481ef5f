"""Campaigns: commands that train sweeps and then write a report from their runs (`make demo`,
`make small`). A new study is a module here; what the campaigns share is in common.py."""
