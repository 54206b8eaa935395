-- Question difficulty: per question (of a lesson's entry or exit quiz), how often learners get it right on
-- their first attempt. A learner's first attempt at a question is their answer with the lowest attempt_index.
-- first_attempt_correct_rate = correct / decided first answers (undecided answers, pending review, left out).
-- The title comes from the catalogue when the question is found there, else from the latest answer.
with

first_attempts as (

    select * from {{ ref('int_first_attempts') }}

),

lesson_questions as (

    select * from {{ ref('stg_lesson_questions') }}

),

-- per question, from one row per learner (progress record) and question (int_first_attempts): the latest answer of
-- a question is the latest of its records' latest answers, so its title is theirs
first_attempts_per_question as (

    select
        lesson_id,
        quiz_type,
        question_id,
        count(*) as first_attempts,
        count(first_is_correct) as first_attempts_decided,
        count(*) filter (where first_is_correct) as first_attempts_correct,
        sum(answers) as answers_all_attempts,
        arg_max(last_title, last_answered_at) as answered_title

    from first_attempts

    group by lesson_id, quiz_type, question_id

),

catalogue as (

    select
        lesson_id,
        quiz_type,
        question_id,
        min(question_title) as question_title,
        min(question_type) as question_type

    from lesson_questions

    where question_id is not null

    group by lesson_id, quiz_type, question_id

),

final as (

    select
        first_attempts_per_question.lesson_id,
        first_attempts_per_question.quiz_type,
        first_attempts_per_question.question_id,
        coalesce(catalogue.question_title, first_attempts_per_question.answered_title) as question_title,
        catalogue.question_type,
        first_attempts_per_question.first_attempts,
        first_attempts_per_question.first_attempts_decided,
        first_attempts_per_question.first_attempts_correct,
        {{ rate(
            'first_attempts_per_question.first_attempts_correct',
            'first_attempts_per_question.first_attempts_decided',
        ) }} as first_attempt_correct_rate,
        cast(first_attempts_per_question.answers_all_attempts as bigint) as answers_all_attempts

    from first_attempts_per_question

    left join catalogue using (lesson_id, quiz_type, question_id)

)

select * from final
