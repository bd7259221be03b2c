"""Scheduled wakeups: parsing `when`, the job table, the scheduler that fires
jobs, one wakeup run, and persona heartbeats."""
