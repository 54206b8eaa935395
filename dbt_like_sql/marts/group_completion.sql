-- Group completion: per group and lesson, how many of the group's current members started, succeeded or
-- failed it. One row per (group, lesson) where at least one member has progress on the lesson.
-- completion_rate = members who succeeded / all current members of the group.
with

group_members as (

    select * from {{ ref('stg_group_members') }}

),

groups as (

    select * from {{ ref('stg_groups') }}

),

lessons as (

    select * from {{ ref('stg_lessons') }}

),

learner_progress as (

    select * from {{ ref('learner_progress') }}

),

group_sizes as (

    select
        group_id,
        count(*) as members

    from group_members

    group by group_id

),

learners_per_group_lesson as (

    select
        group_members.group_id,
        learner_progress.lesson_id,
        count(*) as learners,
        count(*) filter (where learner_progress.status <> 'not-started') as started,
        count(*) filter (where learner_progress.status = 'in-progress') as in_progress,
        count(*) filter (where learner_progress.status = 'succeeded') as succeeded,
        count(*) filter (where learner_progress.status = 'failed') as failed

    from group_members

    inner join learner_progress
        on group_members.user_id = learner_progress.user_id

    group by group_members.group_id, learner_progress.lesson_id

),

final as (

    select
        learners_per_group_lesson.group_id,
        groups.group_title,
        groups.is_disabled as group_is_disabled,
        learners_per_group_lesson.lesson_id,
        lessons.lesson_title,
        group_sizes.members,
        learners_per_group_lesson.learners,
        learners_per_group_lesson.started,
        learners_per_group_lesson.in_progress,
        learners_per_group_lesson.succeeded,
        learners_per_group_lesson.failed,
        learners_per_group_lesson.succeeded / group_sizes.members as completion_rate

    from learners_per_group_lesson

    inner join group_sizes
        on learners_per_group_lesson.group_id = group_sizes.group_id

    left join groups
        on learners_per_group_lesson.group_id = groups.group_id

    left join lessons
        on learners_per_group_lesson.lesson_id = lessons.lesson_id

)

select * from final
