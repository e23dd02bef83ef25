"""The leader's duties: the due-task timer, cron fires and claims."""
