from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Digest",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False, verbose_name="ID")),
                ("tick_s", models.BigIntegerField(unique=True)),
                ("fence", models.BigIntegerField()),
                ("node", models.CharField(max_length=200)),
                ("sent_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
    ]
