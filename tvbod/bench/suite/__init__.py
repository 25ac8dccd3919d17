"""`tvbod bench suite`: plants x drift kinds x algorithms x runs, with a dev / held-out split."""
