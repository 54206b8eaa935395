-- Group completion: per group and lesson, how many of the group's current members started, succeeded or
-- failed it. One row per (group, lesson) where at least one member has progress on the lesson.
-- completion_rate = members who succeeded / all current members of the group.
WITH group_sizes AS (
    SELECT group_id, count(*) AS members
    FROM analytics.stg_group_members
    GROUP BY group_id
),
per_group_lesson AS (
    SELECT
        m.group_id,
        p.lesson_id,
        count(*) AS learners,
        count(*) FILTER (WHERE p.status <> 'not-started') AS started,
        count(*) FILTER (WHERE p.status = 'in-progress') AS in_progress,
        count(*) FILTER (WHERE p.status = 'succeeded') AS succeeded,
        count(*) FILTER (WHERE p.status = 'failed') AS failed
    FROM analytics.stg_group_members AS m
    JOIN analytics.learner_progress AS p ON p.user_id = m.user_id
    GROUP BY m.group_id, p.lesson_id
)
SELECT
    g.group_id,
    grp.group_title,
    grp.is_disabled AS group_is_disabled,
    g.lesson_id,
    l.lesson_title,
    s.members,
    g.learners,
    g.started,
    g.in_progress,
    g.succeeded,
    g.failed,
    g.succeeded / s.members AS completion_rate
FROM per_group_lesson AS g
JOIN group_sizes AS s ON s.group_id = g.group_id
LEFT JOIN analytics.stg_groups AS grp ON grp.group_id = g.group_id
LEFT JOIN analytics.stg_lessons AS l ON l.lesson_id = g.lesson_id
