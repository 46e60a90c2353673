from django.db import models


class Order(models.Model):
    id = models.CharField(max_length=40, primary_key=True)
    email = models.EmailField()
    total_cents = models.IntegerField()
    outbox_id = models.CharField(max_length=26)  # the outbox row of its confirmation
    task_id = models.CharField(max_length=64, null=True)  # Orbit's task, once delivered
