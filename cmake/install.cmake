# Placeholder until the install layout lands.
